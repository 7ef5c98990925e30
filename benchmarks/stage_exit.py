"""What a stage pays after its last line: Python's teardown of torch, MLflow and pandas at the end of the process,
against `harness.process_exit.end_process` (the exit handlers, the flushes, then os._exit), side by side in one run.

Each way runs the same work in a fresh process, `--repeats` times, alternating: the imports of a fine-tune stage,
an MLflow run in a SQLite store with a few params and metrics, a tiny model's checkpoint logged as an artifact. The
time counted is from the work's last line to the process's end, as the parent sees it.

    python benchmarks/stage_exit.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from results_file import Column, write_result  # noqa: E402

WORK = """
import sys, time
import lmtransfer.classification.finetune_stage, lmtransfer.classification.mlflow_model, mlflow, pandas, torch
from lmtransfer.harness.process_exit import end_process
mlflow.set_tracking_uri("sqlite:///" + sys.argv[2] + "/mlflow.db")
with mlflow.start_run():
    mlflow.log_params({"lr": 0.001, "epochs": 2})
    for step in range(10):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), torch.nn.Linear(16, 3))
    torch.optim.AdamW(model.parameters()).step()
    torch.save(model.state_dict(), sys.argv[2] + "/model.pt")
    mlflow.log_artifact(sys.argv[2] + "/model.pt")
print("done", time.time(), flush=True)
if sys.argv[1] == "end_process":
    end_process(0)
"""
WAYS = ("Python's teardown", "end_process")


def one_end(way: str) -> tuple[float, float]:
    """(seconds from the work's last line to the end of the process, seconds of the whole process)."""
    with tempfile.TemporaryDirectory() as folder:
        started = time.time()
        done = subprocess.run([sys.executable, "-c", WORK, "end_process" if way == "end_process" else "usual", folder],
                              capture_output=True, text=True, check=True, env={**os.environ, "MLFLOW_TRACKING_URI": ""})
        ended = time.time()
    last_line = float(next(line for line in done.stdout.splitlines() if line.startswith("done ")).split()[1])
    return ended - last_line, ended - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="processes of each way (alternating; the median kept)")
    args = parser.parse_args()
    began = time.perf_counter()
    one_end(WAYS[0])  # compiles what is not compiled yet, so neither way pays it
    ends: dict[str, list[float]] = {way: [] for way in WAYS}
    whole: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(args.repeats):
        for way in WAYS:
            end, process = one_end(way)
            ends[way].append(end)
            whole[way].append(process)
    rows = [[way, statistics.median(ends[way]), min(ends[way]), max(ends[way]), statistics.median(whole[way])]
            for way in WAYS]
    for row in rows:
        print(f"{row[0]:>18}: after the last line median {row[1]:.2f} s (min {row[2]:.2f}, max {row[3]:.2f}); "
              f"whole process {row[4]:.2f} s")
    print(f"the process ends {rows[0][1] / rows[1][1]:.0f}x sooner after its work; "
          f"{rows[0][4] - rows[1][4]:.2f} s less a process")
    write_result("stage_exit", [Column("exit"), Column("after the last line s", ".2f"), Column("min s", ".2f"),
                                Column("max s", ".2f"), Column("whole process s", ".2f")], rows,
                 seconds=time.perf_counter() - began,
                 notes=f"{args.repeats} fresh processes each, alternating: imports, an MLflow run in SQLite, a logged "
                       "checkpoint, then the exit")


if __name__ == "__main__":
    main()
