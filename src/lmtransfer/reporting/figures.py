"""The figures in docs/figures/: byte copies of the pipelines' plots, checked against what each dvc.lock records.

The plots themselves are pipeline outputs (DVC-cached, or git-tracked for translation), so a fresh clone may not
hold them; their md5 is in the pipeline's committed dvc.lock. `lmtransfer report` copies a plot that matches its
lock into docs/figures/; `lmtransfer report --check` names a figure whose bytes are not the ones its lock records
(an edited figure, or one left from an older run).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from ruamel.yaml import YAML

# docs figure -> (the pipeline's folder, the plot's path in it)
FIGURES: dict[str, tuple[str, str]] = {
    "docs/figures/finetune_accuracy.png": (".", "plots/finetune_accuracy.png"),
    "docs/figures/course_finetune_accuracy.png": ("results/course", "plots/finetune_accuracy.png"),
    "docs/figures/translation_finetune_bleu.png": ("translation", "plots/finetune_bleu.png"),
    "docs/figures/translation_test_scores.png": ("translation", "plots/test_scores.png"),
}


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def locked_md5(root: Path, folder: str, plot: str) -> str | None:
    """The md5 the folder's dvc.lock records for the output `plot`, None when it records none."""
    lock = root / folder / "dvc.lock"
    if not lock.is_file():
        return None
    stages = (YAML(typ="safe").load(lock.read_text(encoding="utf-8")) or {}).get("stages", {})
    for stage in stages.values():
        for out in stage.get("outs", []):
            if out.get("path") == plot:
                return out.get("md5")
    return None


def check_figures(root: Path) -> list[str]:
    """One line per docs figure that is missing or not the plot its pipeline's dvc.lock records."""
    problems = []
    for figure, (folder, plot) in FIGURES.items():
        where = (Path(folder) / plot).as_posix()
        expected = locked_md5(root, folder, plot)
        if expected is None:
            problems.append(f"{figure}: {(Path(folder) / 'dvc.lock').as_posix()} records no {plot}")
        elif not (root / figure).is_file():
            problems.append(f"{figure}: missing; it is a copy of {where} (`lmtransfer report` after the pipeline)")
        elif (actual := _md5(root / figure)) != expected:
            problems.append(f"{figure}: not the {where} the pipeline's dvc.lock records (md5 {actual}, "
                            f"expected {expected}); copy it again with `lmtransfer report` after the pipeline")
    return problems


def copy_figures(root: Path) -> list[str]:
    """Copy each plot that is the one its dvc.lock records over a docs figure that differs; returns those copied."""
    copied = []
    for figure, (folder, plot) in FIGURES.items():
        source, target = root / folder / plot, root / figure
        if not source.is_file() or (plotted := _md5(source)) != locked_md5(root, folder, plot):
            continue
        if not target.is_file() or _md5(target) != plotted:
            shutil.copyfile(source, target)
            copied.append(figure)
    return copied
