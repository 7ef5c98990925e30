"""Several experiments at once: `dvc queue start -j N` with and without sharing the cores.

Three experiments of a small pipeline are queued (each reruns its fine-tunes, evaluate and plot) and
run by `dvc queue start -j 1`, then `-j 3`; the wall time from start to the last one done is printed.
"`-j 3`, every job all cores" is the old behaviour (LMTRANSFER_JOBS=1: each stage takes every core, and
GOMP_SPINCOUNT=300000: its OpenMP threads spin while they wait, libgomp's default); "shared" is the
default: each stage counts the queue's workers and takes cores / workers threads, and waiting threads sleep.

    python benchmarks/parallel_experiments.py            # about 5 minutes on 2 cores
"""

from __future__ import annotations

import itertools
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from results_file import Column, write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from pipeline_repo import NEGATIVE, NEUTRAL, POSITIVE, TINY_PARAMS, make_repo, merge, run, write_tiny_data  # noqa: E402

PARAMS = merge(merge({}, TINY_PARAMS), {
    "model": {"n_layers": 2, "d_model": 128, "n_heads": 2, "d_ff": 128},
    "finetune": {"epochs": 6, "seeds": [0], "max_len": 24},
})
LABELED_ROWS = 3000  # enough that fine-tuning, not process start-up, is what the jobs share


def write_data(root: Path) -> None:
    """The tiny pipeline's corpus, and a labeled file of LABELED_ROWS two-class sentences."""
    write_tiny_data(root)
    rng = random.Random(1)
    rows = ["text\tlabel"] + [
        " ".join(rng.sample(NEUTRAL, 6) + rng.sample(words, 2)) + f"\t{name}"
        for name, words in itertools.islice(itertools.cycle([("pos", POSITIVE), ("neg", NEGATIVE)]), LABELED_ROWS)
    ]
    (root / "raw" / "labeled.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")


MODES = [  # (label, -j, extra environment)
    ("-j 1", 1, {}),
    ("-j 3, every job all cores (before)", 3, {"LMTRANSFER_JOBS": "1", "GOMP_SPINCOUNT": "300000"}),
    ("-j 3, cores shared (default)", 3, {}),
]
EXPERIMENTS = 3
_lr = itertools.count(1)  # every experiment a new learning rate: nothing comes from the run-cache


def queue_wall_seconds(root: Path, env: dict[str, str], jobs: int) -> float:
    for _ in range(EXPERIMENTS):
        run(["dvc", "exp", "run", "--queue", "-S", f"finetune.lr={next(_lr) * 1e-4:.4f}"], root, env)
    start = time.perf_counter()
    run(["dvc", "queue", "start", "-j", str(jobs)], root, env)
    while True:
        time.sleep(2)
        status = run(["dvc", "queue", "status"], root, env)
        if not any(word in status for word in ("Queued", "Running")):
            break
    seconds = time.perf_counter() - start
    if "Failed" in status:
        raise SystemExit(f"an experiment failed:\n{status}\n{run(['dvc', 'queue', 'logs', status.split()[0]], root, env)}")
    run(["dvc", "queue", "stop", "--kill"], root, env) if "worker" in run(["dvc", "queue", "status"], root, env) else None
    return seconds


def main() -> None:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        env = make_repo(root, PARAMS, write_data)
        print("baseline dvc repro (not timed) ...", flush=True)
        run(["dvc", "repro"], root, env)
        run(["git", "add", "-A"], root, env)
        run(["git", "commit", "-qm", "baseline"], root, env)
        rows = []
        for label, jobs, extra in MODES:
            print(f"{EXPERIMENTS} experiments, {label} ...", flush=True)
            mode_env = {**env, **extra}
            mode_env.pop("OMP_NUM_THREADS", None)
            seconds = queue_wall_seconds(root, mode_env, jobs)
            rows.append((label, seconds))
            print(f"  {seconds:.1f} s", flush=True)
    print(f"\n{os.cpu_count()} cores, {EXPERIMENTS} queued experiments (fine-tunes, evaluate, plot each)")
    print(f"{'mode':<40}{'wall s':>8}{'vs -j 1':>9}")
    for label, seconds in rows:
        print(f"{label:<40}{seconds:>8.1f}{seconds / rows[0][1]:>8.2f}x")
    write_result("parallel_experiments", [Column("mode"), Column("wall s", ".1f"), Column("vs -j 1", ".2f")],
                 [[label, round(seconds, 1), round(seconds / rows[0][1], 2)] for label, seconds in rows],
                 seconds=time.perf_counter() - start,
                 notes=f"{EXPERIMENTS} queued experiments (fine-tunes, evaluate, plot each)")


if __name__ == "__main__":
    main()
