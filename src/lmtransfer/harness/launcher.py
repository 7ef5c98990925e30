"""The `dvc` process a stage runs under: what groups its MLflow runs (`pipeline_runs`) and what a stage watches to stop
when it is gone (`stage`)."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache  # a process's launcher does not change: pipeline_runs and the stage's watch ask once between them
def launching_dvc():
    """The `dvc` process this one runs under (`dvc repro`, `dvc exp run`, a queue worker), as a psutil.Process,
    or None when it was started some other way."""
    try:
        import psutil

        for process in psutil.Process().parents():
            command = " ".join(process.cmdline()[:2])
            if "dvc" in Path(process.name()).name or "/dvc" in command or " dvc" in f" {command}":
                return process
    except Exception:  # noqa: BLE001 - psutil missing or a process gone while looking: no launcher to watch
        return None
    return None
