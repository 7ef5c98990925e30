"""What `make venv` costs with and without compiling every installed file up front, side by side in one run.

pip compiles each installed .py file to bytecode unless told `--no-compile`; Python otherwise compiles a module
the first time it is imported, once, and keeps the .pyc. `make venv` installs with `--no-compile`: the modules a
pipeline imports are compiled when its first stages run, the thousands it never imports are not compiled at all.
So each way is timed twice: building the environment, then the first start of what a pipeline imports (the
stages' libraries, and `dvc --version`, which imports DVC). The sum is what a fresh clone's `make run` pays before
its stages' own work. Each way builds in its own temporary folder, from the same requirements, one after the other.

    python benchmarks/venv_build.py            # about 5 minutes on 2 cores
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import REPO, Column, write_result

FIRST_IMPORTS = ("import torch, mlflow, pandas, sklearn, sentencepiece, sacrebleu, matplotlib.pyplot, scipy.stats, "
                 "pydantic, ruamel.yaml, tqdm, psutil")
WAYS = {"pip compiles every file (its default)": [],
        "--no-compile (make venv)": ["--no-compile"]}


def timed(command: list[str], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True)
    return time.perf_counter() - started


def build(flags: list[str], folder: Path) -> tuple[float, float]:
    """(seconds to build the environment, seconds of the first start of the pipeline's imports and of dvc)."""
    venv = folder / ".venv"
    python = str(venv / "bin" / "python")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *flags]
    subprocess.run([*install, "-r", str(REPO / "requirements.txt")], check=True, capture_output=True)
    subprocess.run([*install, "--no-deps", "-e", str(REPO)], check=True, capture_output=True)
    built = time.perf_counter() - started
    first = timed([python, "-c", FIRST_IMPORTS]) + timed([str(venv / "bin" / "dvc"), "--version"], cwd=folder)
    return built, first


def main() -> None:
    started = time.perf_counter()
    rows = []
    for way, flags in WAYS.items():
        with tempfile.TemporaryDirectory() as tmp:
            built, first = build(flags, Path(tmp))
        rows.append([way, round(built, 1), round(first, 1), round(built + first, 1)])
        print(f"{way}: environment {built:.0f} s, first imports {first:.0f} s", flush=True)
    ratio = rows[1][3] / rows[0][3]
    print(f"--no-compile / pip's default: {ratio:.2f}")
    write_result("venv_build", [Column("way"), Column("build the environment, s", ".0f"),
                                Column("first start of the pipeline's imports and dvc, s", ".0f"),
                                Column("both, s", ".0f")], rows, seconds=time.perf_counter() - started,
                 notes=f"each way in a new folder from the same requirements.txt, one after the other; the first "
                       f"imports are those of the stages' libraries and dvc --version; both, --no-compile / pip's default: "
                       f"{ratio:.2f}")


if __name__ == "__main__":
    main()
