"""docs/figures/: copies of the pipelines' plots, checked against the md5 each pipeline's dvc.lock records."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lmtransfer.reporting import figures

REPO = Path(__file__).resolve().parents[2]


def _repo_with_one_figure(root: Path, monkeypatch, plot_bytes: bytes = b"\x89PNG one plot") -> Path:
    monkeypatch.setattr(figures, "FIGURES", {"docs/figures/acc.png": ("task", "plots/acc.png")})
    (root / "task/plots").mkdir(parents=True)
    (root / "task/plots/acc.png").write_bytes(plot_bytes)
    md5 = hashlib.md5(plot_bytes).hexdigest()
    (root / "task/dvc.lock").write_text(f"schema: '2.0'\nstages:\n  plot:\n    cmd: python plot.py\n    outs:\n"
                                        f"    - path: plots/acc.png\n      hash: md5\n      md5: {md5}\n")
    (root / "docs/figures").mkdir(parents=True)
    return root / "docs/figures/acc.png"


def test_report_copies_the_locked_plot_and_the_check_then_passes(tmp_path, monkeypatch):
    figure = _repo_with_one_figure(tmp_path, monkeypatch)
    assert figures.check_figures(tmp_path) == ["docs/figures/acc.png: missing; it is a copy of task/plots/acc.png "
                                               "(`lmtransfer report` after the pipeline)"]
    assert figures.copy_figures(tmp_path) == ["docs/figures/acc.png"]
    assert figure.read_bytes() == b"\x89PNG one plot"
    assert figures.check_figures(tmp_path) == []
    assert figures.copy_figures(tmp_path) == []


def test_an_edited_figure_fails_the_check_naming_it(tmp_path, monkeypatch):
    figure = _repo_with_one_figure(tmp_path, monkeypatch)
    figures.copy_figures(tmp_path)
    figure.write_bytes(figure.read_bytes() + b"!")
    (problem,) = figures.check_figures(tmp_path)
    assert problem.startswith("docs/figures/acc.png: not the task/plots/acc.png the pipeline's dvc.lock records")


def test_a_plot_that_is_not_the_locked_one_is_not_copied(tmp_path, monkeypatch):
    figure = _repo_with_one_figure(tmp_path, monkeypatch)
    (tmp_path / "task/plots/acc.png").write_bytes(b"\x89PNG a plot of another run")
    assert figures.copy_figures(tmp_path) == []
    assert not figure.exists()


@pytest.mark.slow
def test_the_repositorys_figures_are_the_plots_its_locks_record():
    assert figures.check_figures(REPO) == []
