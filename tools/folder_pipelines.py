"""course/dvc.yaml, reviews/dvc.yaml, imdb/dvc.yaml: the classification pipeline (../dvc.yaml) run in a folder of
its own with that folder's params.yaml, generated from it.

The course's experiment (`lmtransfer course`) and the two GPU profiles on the IMDB reviews (docs/guide/gpu-profiles.md)
run the same stages as the built-in run: their data/, models/, metrics/ and plots/ stay apart from the built-in
run's. Every stage, dep and output is ../dvc.yaml's; only the paths into the repository's code gain `../`.

    python tools/folder_pipelines.py           # rewrite each folder's dvc.yaml from dvc.yaml
    python tools/folder_pipelines.py --check   # exit 1 when one is not what dvc.yaml gives
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "dvc.yaml"
GENERATED = "# GENERATED from ../dvc.yaml by `python tools/folder_pipelines.py`: edit dvc.yaml, then run that (a test checks).\n"
COURSE = """\
# The course's experiment (docs/guide/course.md): the classification pipeline on the course's files, with
# course/params.yaml, its outputs in this folder. Run it with `lmtransfer course` (`make course`), which fetches
# and checks the files first; or `dvc repro course/dvc.yaml` once they are in course/data/raw/.
# One difference: evaluate's headline is a plain output here, not a declared metric (see evaluate), so the
# repository-level `dvc metrics show` and `dvc exp show` show the built-in run's headline alone.
#
"""
CODE = re.compile(r"^(\s+(?:- |cmd: python ))(stages/|src/)", re.M)
# evaluate's `metrics:` section (its comment and the headline under it): in a folder's run a plain output, so the
# repository-level `dvc metrics show` and `dvc exp show` stay the built-in run's headline alone (two headlines made
# the table 121 columns wide and prefixed every column of `dvc exp show` with the file's name)
DECLARED_METRICS = re.compile(r"^    # The headline is evaluate's one metrics file;.*?^    metrics:\n(      - metrics/headline\.json:\n"
                              r"          cache: false\n)", re.M | re.S)
PLAIN_HEADLINE = """\
      # a plain output here, not a declared metric, so it never widens the repository-level views (they show the
      # built-in run's headline alone): `dvc metrics show <folder>/metrics/headline.json` or
      # `lmtransfer results --metrics <folder>/metrics` reads it
\\1"""


REVIEWS = """\
# The reviews profile (docs/guide/gpu-profiles.md): the built-in movie sentences, with the 75,000 train and unlabeled
# IMDB reviews as the language model's corpus and reviews/params.yaml's larger recipe, its outputs in this folder.
# Made for a GPU: `lmtransfer imdb` gets the reviews once, then `dvc repro reviews/dvc.yaml`.
# One difference: evaluate's headline is a plain output here, not a declared metric (see evaluate).
#
"""
IMDB = """\
# The IMDb profile (docs/guide/gpu-profiles.md): the Large Movie Review Dataset as the labeled source (25,000 train,
# 25,000 test, as published) and its unlabeled reviews as the corpus, with imdb/params.yaml, its outputs here.
# Made for a GPU: `lmtransfer imdb` gets the reviews once, then `dvc repro imdb/dvc.yaml`.
# One difference: evaluate's headline is a plain output here, not a declared metric (see evaluate).
#
"""
FOLDERS = {"course": COURSE, "reviews": REVIEWS, "imdb": IMDB}  # each folder's pipeline and what its header says


def folder_pipeline(text: str, header: str = COURSE) -> str:
    """`text` (the root dvc.yaml) with its paths into stages/ and src/ made relative to a folder, and evaluate's
    headline a plain output rather than a declared metric."""
    text, declared = DECLARED_METRICS.subn(PLAIN_HEADLINE, text)
    if declared != 1:
        raise SystemExit("dvc.yaml: evaluate's `metrics:` section (the headline) not found where expected: update "
                         "DECLARED_METRICS in tools/folder_pipelines.py")
    return GENERATED + header + CODE.sub(r"\1../\2", text)


def main() -> None:
    source = SOURCE.read_text(encoding="utf-8")
    for folder, header in FOLDERS.items():
        target, expected = REPO / folder / "dvc.yaml", folder_pipeline(source, header)
        if "--check" in sys.argv[1:]:
            current = target.read_text(encoding="utf-8") if target.is_file() else ""
            if current != expected:
                sys.exit(f"{target.relative_to(REPO)} is not what {SOURCE.name} gives: python tools/folder_pipelines.py")
            continue
        target.parent.mkdir(exist_ok=True)
        target.write_text(expected, encoding="utf-8")
        print(f"wrote {target.relative_to(REPO)}")


if __name__ == "__main__":
    main()
