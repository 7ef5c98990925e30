"""A whole pipeline's wall time, stage by stage: `dvc repro --force` of the classification pipeline (or, with
--translation, the translation one) in this checkout, every stage run, the times from each stage's own
`<stage>: done in N s` line. Writes benchmarks/results/pipeline[-translation].json (the docs' stage tables).

    python benchmarks/pipeline_stages.py                 # make run's pipeline, from nothing
    python benchmarks/pipeline_stages.py --translation   # make run-translation's
    python benchmarks/pipeline_stages.py --name pipeline-beside --note "beside ..."   # a run that shares the machine
    python benchmarks/pipeline_stages.py --name pipeline-beside --against pipeline   # + each stage's fraction of
                                                                                    # its time in pipeline.json

It replaces this checkout's outputs, as `make run` would (same params, same results); run it alone on the
machine, unless the neighbour is what you measure (then give --name, so the alone figures stay).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from results_file import REPO, RESULTS, Column, write_result

DONE = re.compile(r"^(?P<stage>[\w@-]+): done in (?P<seconds>[\d.]+) s$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--translation", action="store_true", help="the translation pipeline")
    parser.add_argument("--name", help="the result file's name (default: pipeline[-translation])")
    parser.add_argument("--note", default="", help="what else ran on the machine, for the result file")
    parser.add_argument("--against", metavar="NAME", help="a result file of a run alone (benchmarks/results/NAME.json, "
                        "same machine): each stage's time there and the fraction of that speed this run kept")
    args = parser.parse_args()
    pipeline = ["translation/dvc.yaml"] if args.translation else []
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    stages: dict[str, float] = {}
    start = time.perf_counter()
    with subprocess.Popen(["dvc", "repro", "--force", *pipeline], cwd=REPO, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1) as run:
        for line in run.stdout:
            print(line, end="", flush=True)
            found = DONE.match(line.strip())
            if found:
                stages[found["stage"]] = float(found["seconds"])
    wall = time.perf_counter() - start
    if run.returncode:
        sys.exit(f"pipeline_stages: dvc repro failed (exit {run.returncode}); nothing written")
    rows = [[stage, seconds] for stage, seconds in stages.items()]
    rows.append(["all stages", round(sum(stages.values()), 1)])
    rows.append(["dvc repro, wall", round(wall, 1)])
    name = args.name or ("pipeline-translation" if args.translation else "pipeline")
    columns = [Column("stage"), Column("wall time, s", ",.1f")]
    if args.against:
        alone = {row[0]: row[1] for row in json.loads((RESULTS / f"{args.against}.json").read_text())["rows"]}
        columns += [Column(f"alone ({args.against}), s", ",.1f"), Column("fraction", ".2f")]
        rows = [[*row, alone.get(row[0], ""), round(alone[row[0]] / row[1], 2) if row[0] in alone else ""]
                for row in rows]
    write_result(name, columns, rows, seconds=wall,
                 notes="; ".join(filter(None, ["every stage rerun (--force), the virtual environment already built",
                                               args.note])))
    print(f"pipeline: {wall:.0f} s wall, {sum(stages.values()):.0f} s in {len(stages)} stages")


if __name__ == "__main__":
    main()
