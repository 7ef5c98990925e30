"""`lmtransfer results`: is this run's gap consistent with the committed one, each with its own interval?"""

import json
import subprocess
from pathlib import Path

import pytest
from scipy import stats

from lmtransfer.cli.main import main as lmtransfer
from lmtransfer.reporting.result_files import committed_headline, consistency_lines, difference_test


def test_the_difference_of_two_gaps_is_tested_with_both_intervals():
    z95 = stats.norm.ppf(0.975)
    # each interval +-z95 se: se = 0.01 and 0.02, so the difference 0.05 is 0.05 / sqrt(0.0005) standard errors
    difference, p = difference_test((0.08, 0.08 - 0.01 * z95, 0.08 + 0.01 * z95),
                                    (0.03, 0.03 - 0.02 * z95, 0.03 + 0.02 * z95))
    assert difference == pytest.approx(0.05) and p == pytest.approx(2 * stats.norm.sf(0.05 / 0.0005**0.5))
    assert difference_test((0.0, -0.01, 0.01), (0.0, -0.01, 0.01)) == (0.0, 1.0)


def test_a_rerun_inside_the_noise_is_consistent_and_one_far_outside_is_not():
    committed = {"gap": 0.0, "gap_low": -0.013, "gap_high": 0.013}
    near = consistency_lines({"gap": 0.01, "gap_low": -0.004, "gap_high": 0.024}, committed, "classification", "HEAD")
    assert near[1].endswith(": consistent with the committed run")
    far = consistency_lines({"gap": 0.05, "gap_low": 0.035, "gap_high": 0.065}, committed, "classification", "HEAD")
    assert far[1].endswith("NOT consistent with the committed run")
    translation = {"gap": 1.0, "ci95_low": 0.7, "ci95_high": 1.3}
    assert "consistent with" in consistency_lines(translation, translation, "translation", "HEAD")[1]
    assert consistency_lines(committed, None, "classification", "HEAD")[0].startswith("no committed run")


def test_results_compares_the_run_with_the_committed_file_or_another_run(tmp_path, monkeypatch, capsys):
    headline = {"pretrained": 0.7, "scratch": 0.6, "gap": 0.1, "gap_low": 0.05, "gap_high": 0.15}
    metrics, other = tmp_path / "metrics", tmp_path / "other"
    for folder, gap in ((metrics, 0.1), (other, -0.1)):
        folder.mkdir()
        (folder / "headline.json").write_text(json.dumps({**headline, "gap": gap, "gap_low": gap - 0.05,
                                                          "gap_high": gap + 0.05}))
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "run"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *command], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    assert committed_headline(Path("metrics/headline.json"))["gap"] == 0.1
    (metrics / "evaluate.json").write_text("{}")
    monkeypatch.setattr("lmtransfer.cli.main.results_report", lambda report: "scores")
    lmtransfer(["results", "--metrics", "metrics"])
    assert capsys.readouterr().out.splitlines()[-1].endswith(": consistent with the committed run")
    lmtransfer(["results", "--metrics", "metrics", "--against", "other"])
    assert capsys.readouterr().out.splitlines()[-1].endswith("NOT consistent with the committed run")
