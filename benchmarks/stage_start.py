"""What a stage pays before its first step: Python importing what a fine-tune imports (torch, MLflow, pandas, this
package), with compiled modules cached (Python's default) and without (PYTHONDONTWRITEBYTECODE=1, as many
container images set it, with no cache written before), side by side in one run.

Each way runs the same import in a fresh process, `--repeats` times, alternating; "without" reads its bytecode from
an empty cache folder (PYTHONPYCACHEPREFIX), so nothing compiled earlier is found; "with" from a folder one run
filled first. The Makefile unsets PYTHONDONTWRITEBYTECODE for its targets because of this.

    python benchmarks/stage_start.py
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

# what `python stages/finetune.py` imports before and around its training (its stage module, MLflow's model format)
IMPORTS = "import lmtransfer.classification.finetune_stage, lmtransfer.classification.mlflow_model, mlflow, pandas"


def one_start(cache: Path, write: bool) -> float:
    """Seconds of one fresh process importing IMPORTS with its bytecode cache in `cache`."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(cache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", IMPORTS], env=env, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="starts of each way (alternating; the median kept)")
    args = parser.parse_args()
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as filled:
        one_start(Path(filled), write=True)  # fills the cache, as the first stage of a run does
        times: dict[str, list[float]] = {"cached": [], "compiled each time": []}
        for _ in range(args.repeats):
            times["cached"].append(one_start(Path(filled), write=True))
            times["compiled each time"].append(one_start(Path(empty), write=False))
            assert not any(Path(empty).iterdir()), "the uncached way must not leave a cache behind"
    medians = {way: statistics.median(seconds) for way, seconds in times.items()}
    rows = [[way, medians[way], min(times[way]), max(times[way]), medians[way] / medians["cached"]] for way in times]
    for row in rows:
        print(f"{row[0]:>20}: median {row[1]:.2f} s (min {row[2]:.2f}, max {row[3]:.2f}), x{row[4]:.2f}")
    write_result("stage_start", [Column("bytecode"), Column("median s", ".2f"), Column("min s", ".2f"),
                                 Column("max s", ".2f"), Column("x cached", ".2f")], rows,
                 seconds=time.perf_counter() - began,
                 notes=f"{args.repeats} fresh processes each, alternating: {IMPORTS}")


if __name__ == "__main__":
    main()
