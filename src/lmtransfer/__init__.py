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

And it chooses, once, how OpenMP's idle threads wait (`choose_openmp_wait`): libgomp reads that when
torch loads it, so it too must come before torch.
"""

from __future__ import annotations

import os
import platform
import sys
import time

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


SPIN_COUNT = "10000"  # rounds an idle thread spins before it sleeps (libgomp's own default: 300,000)
BUSY_CORES = 0.5  # cores kept busy by other programs from which idle threads sleep at once


def cores_busy_with_others(seconds: float = 0.1) -> float:
    """Cores other programs kept busy over `seconds` (ten of the kernel's 10 ms ticks per core at 0.1 s)."""
    import psutil

    def busy() -> float:
        cpu = psutil.cpu_times()
        return sum(getattr(cpu, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))

    machine, own, start = busy(), time.process_time(), time.perf_counter()
    time.sleep(seconds)
    others = busy() - machine - (time.process_time() - own)
    return max(0.0, others) / (time.perf_counter() - start)


def choose_openmp_wait(others_busy=cores_busy_with_others) -> dict[str, str]:
    """How OpenMP's idle threads wait, chosen once as the process starts; returns what was set.

    A stage's second thread waits between every two parallel operations. Left to itself libgomp spins it for
    300,000 rounds first, so it holds its core all the time, and beside a program that does not yield
    (`yes > /dev/null`) the two fight for the cores: a stage kept 0.19-0.27 of its speed. So: beside others
    that keep `BUSY_CORES` busy as the process starts, threads sleep at once (OMP_WAIT_POLICY=PASSIVE: a fair
    share, at 0.82-0.94 of the speed alone); else they spin a short while, as fast alone as libgomp's long
    spin (`benchmarks/fair_share.py` measures both).
    The user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins; with torch loaded already it is too late to choose.
    Only speed changes, never a result."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ or "torch" in sys.modules:
        return {}
    busy = others_busy() >= BUSY_CORES
    chosen = {"OMP_WAIT_POLICY": "PASSIVE"} if busy else {"GOMP_SPINCOUNT": SPIN_COUNT}
    os.environ.update(chosen)
    return chosen


pin_cpu_kernels()
choose_openmp_wait()
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # MLFLOW_DISABLE_TELEMETRY=false turns it back on
