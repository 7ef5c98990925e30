"""A whole pipeline's wall time, stage by stage: `dvc repro --force` of the classification pipeline (or, with
--translation, the translation one) in this checkout, every stage run, the times from each stage's own
`<stage>: done in N s` line. Writes benchmarks/results/pipeline[-translation].json (the docs' stage tables).

    python benchmarks/pipeline_stages.py                 # make run's pipeline, from nothing
    python benchmarks/pipeline_stages.py --translation   # make run-translation's
    python benchmarks/pipeline_stages.py --translation --from-log run.log --wall 1150 --note "make run-translation
        on a fresh clone, make venv 180 s before it"   # the stages of a run already made (its printout), no rerun

It replaces this checkout's outputs, as `make run` would (same params, same results); run it alone on the machine.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from results_file import REPO, Column, write_result

DONE = re.compile(r"^(?P<stage>[\w@-]+): done in (?P<seconds>[\d.]+) s$")


def stage_times(lines) -> dict[str, float]:
    """Each stage's own `<stage>: done in N s` line, stage -> seconds, in the order they ran."""
    return {found["stage"]: float(found["seconds"]) for line in lines if (found := DONE.match(line.strip()))}


def rerun(pipeline: list[str]) -> tuple[dict[str, float], float]:
    """`dvc repro --force` of the pipeline, its printout passed through: the stage times and the wall time."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    lines = []
    start = time.perf_counter()
    with subprocess.Popen(["dvc", "repro", "--force", *pipeline], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1) as run:
        for line in run.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    if run.returncode:
        sys.exit(f"pipeline_stages: dvc repro failed (exit {run.returncode}); nothing written")
    return stage_times(lines), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--translation", action="store_true", help="the translation pipeline")
    parser.add_argument("--note", default="", help="what else the result file should say (how the run was made)")
    parser.add_argument("--from-log", type=Path, metavar="LOG", help="no run: the stage times in the printout of a "
                        "run already made (make run-translation's, say), with --wall its wall time")
    parser.add_argument("--wall", type=float, help="with --from-log: that run's wall time, s")
    args = parser.parse_args()
    if args.from_log:
        if args.wall is None:
            parser.error("--from-log needs --wall, the run's wall time")
        stages, wall = stage_times(args.from_log.read_text(errors="replace").splitlines()), args.wall
    else:
        stages, wall = rerun(["translation/dvc.yaml"] if args.translation else [])
    rows = [[stage, seconds] for stage, seconds in stages.items()]
    rows.append(["all stages", round(sum(stages.values()), 1)])
    made = "make run-translation" if args.translation else "make run"
    rows.append([f"{made}, wall" if args.from_log else "dvc repro, wall", round(wall, 1)])
    name = "pipeline-translation" if args.translation else "pipeline"
    columns = [Column("stage"), Column("wall time, s", ",.1f")]
    how = "the stages of a run already made, from its printout" if args.from_log else \
        "every stage rerun (--force), the virtual environment already built"
    write_result(name, columns, rows, seconds=wall, notes="; ".join(filter(None, [how, args.note])))
    print(f"pipeline: {wall:.0f} s wall, {sum(stages.values()):.0f} s in {len(stages)} stages")


if __name__ == "__main__":
    main()
