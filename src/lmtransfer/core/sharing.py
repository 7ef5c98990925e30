"""How many training jobs share this machine, so that each takes its share of the cores.

Two jobs that each took all cores (`dvc queue start -j 2`, or any other job) would run twice as
many threads as there are cores, and OpenMP threads that spin while they wait take the cores the
other job needs (measured: a fine-tuning epoch from 0.14 s to 8.6 s). So each stage counts the jobs
(`LMTRANSFER_JOBS`, else the DVC queue workers running on this machine), takes cores / jobs
threads, and lets waiting threads sleep when it is not alone. Other
programs it cannot count, but it can see them: a process that starts while others keep the cores busy
lets its waiting threads sleep at once, else they spin briefly before they sleep (`choose_openmp_wait`).
No torch import here: the wait policy must be set before torch loads OpenMP.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import NamedTuple

from lmtransfer.core.errors import ConfigError

JOBS_ENV = "LMTRANSFER_JOBS"  # how many jobs share the machine; overrides counting the DVC queue's workers
SPIN_COUNT = 10_000  # rounds an idle OpenMP thread spins before it sleeps (libgomp's own default: 300,000)
CHOSEN_ENV = "LMTRANSFER_OPENMP_WAIT"  # what `choose_openmp_wait` set, so that a child process chooses afresh
QUEUE_WORKER = "queue-worker"  # in the command line of each `dvc queue start -j N` worker process
BUSY_CORES = 0.5  # cores other programs keep busy from which this process's waiting threads do not spin
BUSY_SAMPLE_SECONDS = 0.1  # how long the machine is watched at start: ten of the kernel's 10 ms ticks per core
SPIN_COUNT_BESIDE_NICED = 300_000  # libgomp's own: beside only niced work, a waiting thread keeps its core
busy_at_start = None  # BusyCores: what others kept busy when this process chose how its threads wait


def is_main_process() -> bool:
    """Rank 0 of a torchrun job (torchrun sets RANK), or a process on its own: the one that prints, logs to
    MLflow and writes outputs. Here, free of torch, so MLflow logging can ask without loading it."""
    return int(os.environ.get("RANK", "0")) == 0


@functools.cache
def running_queue_workers() -> int:
    """DVC experiment-queue workers running on this machine, any repository's (they all share its cores).
    Counted once per process (a scan of every process): the wait policy set at import and the thread count
    chosen later see the same number."""
    import psutil

    count = 0
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if QUEUE_WORKER in command and any(part.startswith("dvc-exp-") for part in command):
            count += 1
    return count


def parallel_jobs() -> int:
    """`LMTRANSFER_JOBS` when set; else, inside a DVC stage, the running queue workers (at least 1); else 1."""
    value = os.environ.get(JOBS_ENV, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"{JOBS_ENV}={value!r}: expected a whole number of jobs, 1 or more")
        return int(value)
    if "DVC_ROOT" not in os.environ and "DVC_EXP_NAME" not in os.environ:
        return 1  # not a pipeline stage: a notebook, the CLI, the tests
    return max(1, running_queue_workers())


def thread_share(jobs: int, cores: int | None = None) -> int:
    """Threads for one of `jobs` jobs on `cores` cores (all of this machine's by default): at least one."""
    return max(1, (cores or os.cpu_count() or 1) // jobs)


class BusyCores(NamedTuple):
    """Cores other programs kept busy: `niced`, at a raised nice level while this process's is not raised;
    `normal`, the rest."""

    normal: float
    niced: float


def busy_cores_of_others(seconds: float = BUSY_SAMPLE_SECONDS) -> BusyCores:
    """Cores that other programs keep busy, watched for `seconds`; niced time apart (those programs asked to
    yield: beside them a process is fastest spinning longest)."""
    import psutil

    def busy(times) -> tuple[float, float]:
        normal = times.user + times.system + getattr(times, "irq", 0.0) + getattr(times, "softirq", 0.0)
        return normal, getattr(times, "nice", 0.0)

    me = psutil.Process()
    start, machine, mine = time.perf_counter(), busy(psutil.cpu_times()), me.cpu_times()
    time.sleep(seconds)
    machine_after, mine_after = busy(psutil.cpu_times()), me.cpu_times()
    elapsed = time.perf_counter() - start
    own = (mine_after.user + mine_after.system) - (mine.user + mine.system)
    normal, niced = machine_after[0] - machine[0], machine_after[1] - machine[1]
    if niced_self():  # its own time is niced time, and niced programs did not ask to yield to it
        return BusyCores(max(0.0, normal + niced - own) / elapsed, 0.0)
    return BusyCores(max(0.0, normal - own) / elapsed, max(0.0, niced) / elapsed)


def niced_self() -> bool:
    """Whether this process runs at a raised nice level (`nice make run`)."""
    return hasattr(os, "nice") and os.nice(0) > 0


def others_were_busy() -> bool:
    """Whether other programs kept `BUSY_CORES` busy when this process chose how its threads wait."""
    return busy_at_start is not None and busy_at_start.normal >= BUSY_CORES


def choose_openmp_wait(jobs: int, others_busy=busy_cores_of_others) -> dict[str, str]:
    """How OpenMP's idle threads wait, read once when torch loads OpenMP; returns what was set.

    Left to itself, libgomp spins a waiting thread for 300,000 rounds (milliseconds) before it sleeps. A
    stage's second thread waits like that between every two parallel operations, so it holds a core all the
    time; beside any other CPU-heavy program the two fight for the cores and a stage ran 10-29 times slower.
    Alone, spinning a little is what keeps the next operation's start fast: GOMP_SPINCOUNT=10000 keeps 99%
    of the speed alone. Beside others, threads that sleep at once (OMP_WAIT_POLICY=PASSIVE) keep more of it,
    most of all in fine-tuning's small operations, but alone they are slower (`benchmarks/cotenancy.py`
    measures both). So they do not spin with known co-tenants (jobs > 1), nor, when the jobs are not counted
    by `LMTRANSFER_JOBS`, while other programs keep `BUSY_CORES` busy as this process starts
    (`others_busy()`; not asked once torch is loaded, too late to matter). Beside niced programs alone, a
    thread that sleeps briefly lets them in at every gap between two operations and waits to get its core
    back: there threads spin as long as libgomp's own default, which keeps the cores between operations.
    Nothing is set when the user chose either variable; none of this changes a result, only when a thread
    waits."""
    for name, value in (item.split("=", 1) for item in os.environ.get(CHOSEN_ENV, "").split(",") if item):
        if os.environ.get(name) == value:  # chosen by a parent lmtransfer process, not the user: choose afresh
            del os.environ[name]
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return {}
    global busy_at_start
    if jobs == 1 and not os.environ.get(JOBS_ENV, "").strip() and "torch" not in sys.modules:
        busy_at_start = others_busy()
    if jobs > 1 or others_were_busy():
        chosen = {"OMP_WAIT_POLICY": "PASSIVE"}
    else:
        niced_only = busy_at_start is not None and busy_at_start.niced >= BUSY_CORES
        chosen = {"GOMP_SPINCOUNT": str(SPIN_COUNT_BESIDE_NICED if niced_only else SPIN_COUNT)}
    os.environ.update(chosen)
    os.environ[CHOSEN_ENV] = ",".join(f"{name}={value}" for name, value in chosen.items())
    return chosen
