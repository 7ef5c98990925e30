"""course/dvc.yaml: the classification pipeline (../dvc.yaml) run in the course's folder, generated from it.

The course's experiment (`lmtransfer course`) runs the same stages as the built-in run, on the course's files
and with its own params.yaml, in course/: its data/, models/, metrics/ and plots/ stay apart from the built-in
run's. Every stage, dep and output is ../dvc.yaml's; only the paths into the repository's code gain `../`.

    python tools/course_pipeline.py           # rewrite course/dvc.yaml from dvc.yaml
    python tools/course_pipeline.py --check   # exit 1 when course/dvc.yaml is not what dvc.yaml gives
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE, TARGET = REPO / "dvc.yaml", REPO / "course" / "dvc.yaml"
HEADER = """\
# GENERATED from ../dvc.yaml by `python tools/course_pipeline.py`: edit dvc.yaml, then run that (a test checks).
# The course's experiment (docs/guide/course.md): the classification pipeline on the course's files, with
# course/params.yaml, its outputs in this folder. Run it with `lmtransfer course` (`make course`), which fetches
# and checks the files first; or `dvc repro course/dvc.yaml` once they are in course/data/raw/.
# One difference: evaluate's headline is a plain output here, not a declared metric (see evaluate), so the
# repository-level `dvc metrics show` and `dvc exp show` show the built-in run's headline alone.
#
"""
CODE = re.compile(r"^(\s+(?:- |cmd: python ))(stages/|src/)", re.M)
# evaluate's `metrics:` section (its comment and the headline under it): in the course's run a plain output, so the
# repository-level `dvc metrics show` and `dvc exp show` stay the built-in run's headline alone (two headlines made
# the table 121 columns wide and prefixed every column of `dvc exp show` with the file's name)
DECLARED_METRICS = re.compile(r"^    # The headline is evaluate's one metrics file;.*?^    metrics:\n(      - metrics/headline\.json:\n"
                              r"          cache: false\n)", re.M | re.S)
PLAIN_HEADLINE = """\
      # a plain output here, not a declared metric, so it never widens the repository-level views (they show the
      # built-in run's headline alone): `dvc metrics show course/metrics/headline.json` or
      # `lmtransfer results --metrics course/metrics` reads it
\\1"""


def course_pipeline(text: str) -> str:
    """`text` (the root dvc.yaml) with its paths into stages/ and src/ made relative to course/, and evaluate's
    headline a plain output rather than a declared metric."""
    text, declared = DECLARED_METRICS.subn(PLAIN_HEADLINE, text)
    if declared != 1:
        raise SystemExit("dvc.yaml: evaluate's `metrics:` section (the headline) not found where expected: update "
                         "DECLARED_METRICS in tools/course_pipeline.py")
    return HEADER + CODE.sub(r"\1../\2", text)


def main() -> None:
    expected = course_pipeline(SOURCE.read_text(encoding="utf-8"))
    if "--check" in sys.argv[1:]:
        current = TARGET.read_text(encoding="utf-8") if TARGET.is_file() else ""
        if current != expected:
            sys.exit(f"{TARGET.relative_to(REPO)} is not what {SOURCE.name} gives: python tools/course_pipeline.py")
        return
    TARGET.parent.mkdir(exist_ok=True)
    TARGET.write_text(expected, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(REPO)}")


if __name__ == "__main__":
    main()
