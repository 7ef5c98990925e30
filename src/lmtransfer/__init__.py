"""lmtransfer: pretrain a Transformer LM, fine-tune it, compare it with the same network from scratch.

Importing the package pins PyTorch's CPU kernels to the AVX2 instruction set (unless
LMTRANSFER_CPU_KERNELS=native). PyTorch, MKL and oneDNN otherwise pick their kernels
per CPU (AVX-512 on one machine, AVX2 on the next), and those kernels round
differently, so the same commit and params gave different metrics on two machines
of the same type. The variables must be set before torch is first imported, which
is why this happens here, in the package's first import.

It also turns MLflow's telemetry off (MLFLOW_DISABLE_TELEMETRY=true unless the user
set it): the pipeline promises no network use but the pinned dataset download, and
MLflow decides on telemetry when it is imported, so this too must come first.

A bad `LMTRANSFER_*` value counts as unset here (`knobs.read_at_import`), so importing never ends in a
traceback; every entry point refuses it next, in one line (`knobs.check`).

And it chooses how OpenMP's waiting threads wait (`sharing.choose_openmp_wait`, read when torch
loads OpenMP): spin a while, then sleep, so that a stage keeps a fair share of the cores beside
other programs; no spin at all when several of its own jobs share the machine.
"""

from __future__ import annotations

import os
import platform

from lmtransfer.core import knobs  # no torch there: the LMTRANSFER_* variables, read before torch

KERNELS_ENV = knobs.CPU_KERNELS  # avx2 (default): same numbers on every AVX2 CPU; native: fastest
_PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def _cpu_has_avx2() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return any(line.startswith("flags") and " avx2" in line for line in info)
    except OSError:  # not Linux: leave the libraries' own choice
        return False


def pin_cpu_kernels() -> dict[str, str]:
    """Set the kernel-choice variables (those the user has not set already); returns what was set."""
    if knobs.read_at_import(KERNELS_ENV) == "native" or not _cpu_has_avx2():
        return {}
    pinned = {name: value for name, value in _PINNED.items() if name not in os.environ}
    os.environ.update(pinned)
    return pinned


pin_cpu_kernels()
from lmtransfer.core.sharing import choose_openmp_wait, parallel_jobs  # noqa: E402 - after the pins, before any torch

choose_openmp_wait(parallel_jobs(at_import=True))  # a bad LMTRANSFER_* value: refused by knobs.check
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # MLFLOW_DISABLE_TELEMETRY=false turns it back on
