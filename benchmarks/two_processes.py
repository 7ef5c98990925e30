"""One process against two (`-S train.nproc=2`, DDP over gloo) through the real pipeline: the same curves?

A small pipeline (2 layers of 128, dropout 0, so that only float rounding can differ) trains
`finetune_pretrained@0-0` three times with `dvc exp run`: one process on all cores (the reference), two
processes (each with half the cores), and one process on one thread. The third is the yardstick: it
changes nothing but the order of the float sums, as the second does, so the two columns show whether
DDP adds any difference of its own beyond rounding. Printed: the largest relative difference of any
logged loss from the reference per curve file, how it grows over pretraining's steps, and each stage's
wall time (its `<stage>: done in N s` line). With dropout > 0 each process draws its own rows' masks and
the curves match only statistically (README: Several processes and GPUs).

    python benchmarks/two_processes.py        # about 2 minutes on 2 cores
"""

from __future__ import annotations

import csv
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from pipeline_repo import TINY_PARAMS, make_repo, merge, run, write_tiny_data  # noqa: E402
from results_file import Column, write_result  # noqa: E402

PARAMS = merge(merge({}, TINY_PARAMS), {
    "model": {"n_layers": 2, "d_model": 128, "n_heads": 2, "d_ff": 128, "dropout": 0.0},
    "pretrain": {"max_steps": 60, "batch_size": 32, "seq_len": 32, "eval_every": 20, "seeds": [0]},
    "finetune": {"epochs": 4, "seeds": [0]},
})
TARGET = "finetune_pretrained@0-0"
RUNS = {  # label: dvc exp run overrides; the first is the reference
    "1 process, all cores": ["-S", "train.nproc=1", "-S", "train.num_threads=0"],
    "2 processes (gloo)": ["-S", "train.nproc=2", "-S", "train.num_threads=0"],
    "1 process, 1 thread": ["-S", "train.nproc=1", "-S", "train.num_threads=1"],
}
CURVES = ["metrics/pretrain/seed0/train.tsv", "metrics/pretrain/seed0/valid.tsv",
          "metrics/finetune/pretrained/seed0-0.tsv"]


def curves(root: Path) -> dict[str, list[dict[str, str]]]:
    return {name: list(csv.DictReader((root / name).open(), delimiter="\t")) for name in CURVES}


def stage_seconds(log: str) -> dict[str, float]:
    return {stage: float(seconds) for stage, seconds in re.findall(r"^(\S+): done in ([\d.]+) s", log, re.M)}


def relative_differences(one: list[dict[str, str]], two: list[dict[str, str]]) -> list[float]:
    """|a - b| / |a| for every `*loss` value of every row, in the file's order."""
    if len(one) != len(two):
        raise SystemExit(f"the runs logged {len(one)} and {len(two)} rows")
    return [abs(float(a[key]) - float(b[key])) / abs(float(a[key])) for a, b in zip(one, two)
            for key in a if key.endswith("loss")]


def main() -> None:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        env = make_repo(root, PARAMS, write_tiny_data)
        env.pop("OMP_NUM_THREADS", None)
        results = {}
        for label, overrides in RUNS.items():
            print(f"{label}: dvc exp run {TARGET} {' '.join(overrides)} ...", flush=True)
            log = run(["dvc", "exp", "run", TARGET, *overrides], root, env)
            if ("processes under torchrun" in log) != ("train.nproc=2" in overrides):
                raise SystemExit(f"{label}: not the expected number of processes:\n{log[-2000:]}")
            results[label] = curves(root), stage_seconds(log)
    (reference, _), (processes, _), (threads, _) = (results[label] for label in RUNS)
    differences = {name: (relative_differences(reference[name], processes[name]),  # 2 processes, 1 thread
                          relative_differences(reference[name], threads[name])) for name in CURVES}
    print(f"\n{os.cpu_count()} cores; largest relative difference of any logged loss from the first run")
    print(f"{'curve file':<40}{'values':>7}{'2 processes':>13}{'1 thread':>10}")
    for name, (ddp, single) in differences.items():
        print(f"{name:<40}{len(ddp):>7}{max(ddp):>13.1e}{max(single):>10.1e}")
    print(f"\nper logged step of {CURVES[0]} (how rounding differences grow with training):")
    print(f"{'step':>6}{'2 processes':>13}{'1 thread':>10}")
    steps = [row["step"] for row in reference[CURVES[0]]]
    for step, ddp, single in zip(steps, *differences[CURVES[0]]):
        print(f"{step:>6}{ddp:>13.1e}{single:>10.1e}")
    print(f"\n{'stage wall time, s':<24}" + "".join(f"{label:>24}" for label in RUNS))
    for stage in ("pretrain@0", TARGET):
        print(f"{stage:<24}" + "".join(f"{results[label][1][stage]:>24.1f}" for label in RUNS))
    rows = [[name, len(ddp), max(ddp), max(single)] for name, (ddp, single) in differences.items()]
    rows += [[f"{CURVES[0]}, step {step}", 1, ddp, single]
             for step, ddp, single in list(zip(steps, *differences[CURVES[0]]))[:3]]
    write_result("two_processes", [Column("curve file"), Column("losses", ",.0f"), Column("2 processes", ".1e"),
                                   Column("1 thread", ".1e")], rows, seconds=time.perf_counter() - start,
                 notes="the largest relative difference of any logged loss from one process on all cores; "
                       "then the first three logged pretraining steps alone")


if __name__ == "__main__":
    main()
