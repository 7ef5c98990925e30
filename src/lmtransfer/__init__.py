"""lmtransfer: pretrain a Transformer LM, fine-tune it, compare it with the same network from scratch.

The first import sets what must be set before torch (and MLflow) load: PyTorch, MKL and oneDNN kernels pinned to
AVX2 (kernels chosen per CPU round differently; LMTRANSFER_CPU_KERNELS=native lets each pick), how OpenMP's idle
threads wait (`choose_openmp_wait`), MLflow's telemetry off (MLFLOW_DISABLE_TELEMETRY=false turns it on). A bad
LMTRANSFER_* value counts as unset here, so importing never raises; every entry point refuses it next.
"""

from __future__ import annotations

import os
import platform
import sys
import time

from lmtransfer.core import knobs  # no torch there

KERNELS_ENV = knobs.CPU_KERNELS
_PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
SPIN_COUNT = "10000"  # rounds an idle thread spins before it sleeps (libgomp's own default: 300,000)
BUSY_CORES = 0.5  # cores kept busy by other programs from which idle threads sleep at once


def _cpu_has_avx2() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return any(line.startswith("flags") and " avx2" in line for line in info)
    except OSError:  # not Linux: leave the libraries' own choice
        return False


def pin_cpu_kernels() -> dict[str, str]:
    """Set the kernel-choice variables the user has not set; returns what was set."""
    if knobs.read_at_import(KERNELS_ENV) == "native" or not _cpu_has_avx2():
        return {}
    pinned = {name: value for name, value in _PINNED.items() if name not in os.environ}
    os.environ.update(pinned)
    return pinned


def cores_busy_with_others(seconds: float = 0.1) -> float:
    """Cores other programs kept busy over `seconds`."""
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

    libgomp spins an idle thread 300,000 rounds: beside a program that does not yield (`yes > /dev/null`) a stage
    kept 0.19-0.27 of its speed. Beside busy cores threads sleep at once (PASSIVE: 0.82-0.94 of the speed alone),
    else they spin a short while (benchmarks/fair_share.py). The user's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins;
    after torch loads it is too late. Results never change."""
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ or "torch" in sys.modules:
        return {}
    busy = others_busy() >= BUSY_CORES
    chosen = {"OMP_WAIT_POLICY": "PASSIVE"} if busy else {"GOMP_SPINCOUNT": SPIN_COUNT}
    os.environ.update(chosen)
    return chosen


pin_cpu_kernels()
choose_openmp_wait()
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
