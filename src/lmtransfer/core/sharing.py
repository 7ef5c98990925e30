"""How many training jobs share this machine, so that each takes its share of the cores.

Two jobs that each took all cores (`dvc queue start -j 2`, or any other job) would run twice as
many threads as there are cores, and OpenMP threads that spin while they wait take the cores the
other job needs (measured: a fine-tuning epoch from 0.14 s to 8.6 s). So each stage counts the jobs
(`LMTRANSFER_JOBS`, else the DVC queue workers running on this machine), takes cores / jobs
threads, and lets waiting threads sleep when it is not alone. Other
programs it cannot count, but it can see them: a process that starts while others keep the cores busy
lets its waiting threads sleep at once, else they spin a while before they sleep (`choose_openmp_wait`),
and a training stage keeps looking (`NeighbourWatch`) so that it can hand its training over to a process
with the other wait when a neighbour arrives or leaves (`training.handover`).
No torch import here: the wait policy must be set before torch loads OpenMP.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from typing import NamedTuple

from lmtransfer.core import knobs

JOBS_ENV = knobs.JOBS  # how many jobs share the machine; overrides counting the DVC queue's workers
SPIN_COUNT = 50_000  # rounds an idle OpenMP thread spins before it sleeps (libgomp's own default: 300,000)
CHOSEN_ENV = knobs.OPENMP_WAIT  # what `choose_openmp_wait` set, so that a child process chooses afresh
QUEUE_WORKER = "queue-worker"  # in the command line of each `dvc queue start -j N` worker process
BUSY_CORES = 0.5  # cores other programs keep busy from which this process's waiting threads do not spin
BUSY_SAMPLE_SECONDS = 0.1  # how long the machine is watched at start: ten of the kernel's 10 ms ticks per core
busy_at_start = None  # BusyCores: what others kept busy when this process chose how its threads wait
HANDOVER_ENV = knobs.HANDOVER  # set by a training process for the one it hands its work over to (JSON)


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


def parallel_jobs(at_import: bool = False) -> int:
    """`LMTRANSFER_JOBS` when set; else, inside a DVC stage, the running queue workers (at least 1); else 1.
    `at_import`: a bad value counts as unset (the package's first import must not raise; `knobs.check` refuses it)."""
    value = knobs.read_at_import(JOBS_ENV) if at_import else knobs.read(JOBS_ENV)
    if value:
        return value
    if "DVC_ROOT" not in os.environ and "DVC_EXP_NAME" not in os.environ:
        return 1  # not a pipeline stage: a notebook, the CLI, the tests
    return max(1, running_queue_workers())


def thread_share(jobs: int, cores: int | None = None) -> int:
    """Threads for one of `jobs` jobs on `cores` cores (all of this machine's by default): at least one."""
    return max(1, (cores or os.cpu_count() or 1) // jobs)


class BusyCores(NamedTuple):
    """Cores other programs kept busy: `niced`, at a raised nice level in this process's session while this
    process's is not raised (those yield to it); `normal`, the rest."""

    normal: float
    niced: float


WAITS = {  # how OpenMP's idle threads wait, by name: what `choose_openmp_wait` sets
    "spin": {"GOMP_SPINCOUNT": str(SPIN_COUNT)},  # alone, or beside niced programs of this session only
    "sleep": {"OMP_WAIT_POLICY": "PASSIVE"},  # beside programs that do not yield
}
WAIT_WORDS = {name: f"waiting threads {how} ({', '.join(f'{k}={v}' for k, v in WAITS[name].items())})"
              for name, how in (("spin", "spin, then sleep"), ("sleep", "sleep at once"))}
chosen_wait: str | None = None  # the name this process's threads wait by; None: the user's variables rule


def wait_for(busy: BusyCores) -> str:
    """The wait that keeps most speed beside what others keep busy (`choose_openmp_wait` says why)."""
    return "sleep" if busy.normal >= BUSY_CORES else "spin"


def better_wait(current: str, busy: BusyCores) -> str | None:
    """The wait to change to from `current`, beside what others kept busy during a reading; None: keep it.

    Spinning threads beside a program that does not yield lose most of their speed: sleep. Sleeping threads
    lose speed once those are gone (alone: 9-15%, `alone-passive`): spin again. Niced programs of this session
    change nothing: they yield, and a thread that spins through the gap between two operations keeps its core
    from them (`benchmarks/cotenancy.py`, `late-neighbour-niced`). Sleeping asks for half a core of others'
    time, spinning again for under a quarter: a neighbour that comes and goes near the line does not have the
    stage hand over at every reading."""
    if current != "sleep":
        return "sleep" if busy.normal >= BUSY_CORES else None
    return "spin" if busy.normal < BUSY_CORES / 2 else None


def autogroup(pid: int | str = "self") -> str | None:
    """The scheduler's group of a process (`/autogroup-12`), or None where the kernel shares the CPU by process
    alone. With autogroups (one per session: a terminal, `setsid`) the CPU is shared between sessions before
    `nice` is looked at, so a niced program in another session takes its session's share and yields nothing."""
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled", encoding="ascii") as enabled:
            if enabled.read().strip() != "1":
                return None
    except OSError:
        return None
    return _group_of(pid)


def _group_of(pid: int | str) -> str | None:
    """A process's autogroup as /proc names it, or None (gone, or not Linux)."""
    try:
        with open(f"/proc/{pid}/autogroup", encoding="ascii") as group:
            return group.read().split()[0]
    except (OSError, IndexError):
        return None


def niced_here() -> dict[int, float] | None:
    """CPU seconds so far of each niced process in this process's autogroup (its session); None without
    autogroups, where every niced process yields to this one."""
    import psutil

    mine = autogroup()
    if mine is None:
        return None
    seconds = {}
    for process in psutil.process_iter(["nice", "cpu_times"]):
        times = process.info["cpu_times"]
        if (process.info["nice"] or 0) > 0 and times is not None and _group_of(process.pid) == mine:
            seconds[process.pid] = times.user + times.system
    return seconds


class CpuClock(NamedTuple):
    """The machine's and this process's CPU seconds at one moment: two of them give what others kept busy."""

    at: float
    normal: float
    niced: float
    own: float
    niced_here: dict[int, float] | None

    @classmethod
    def read(cls) -> CpuClock:
        import psutil

        machine, mine = psutil.cpu_times(), psutil.Process().cpu_times()
        normal = machine.user + machine.system + getattr(machine, "irq", 0.0) + getattr(machine, "softirq", 0.0)
        return cls(time.perf_counter(), normal, getattr(machine, "nice", 0.0), mine.user + mine.system, niced_here())

    def busy_since(self, earlier: CpuClock) -> BusyCores:
        """Cores others kept busy between `earlier` and this reading. Niced time counts as yielding only where
        it is seen: processes of this session present at this reading (all their time, for one that started
        since). The rest (other sessions' niced programs, and short ones that came and went between the two
        readings, whose session is not known) counts as not yielding: wrongly taken for yielding, it would have
        threads spin against a program that does not yield, the worst case."""
        elapsed = max(self.at - earlier.at, 1e-9)
        own = self.own - earlier.own
        normal, niced = self.normal - earlier.normal, self.niced - earlier.niced
        if niced_self():  # its own time is niced time, and niced programs did not ask to yield to it
            return BusyCores(max(0.0, normal + niced - own) / elapsed, 0.0)
        here = niced if self.niced_here is None or earlier.niced_here is None else sum(
            max(0.0, seconds - earlier.niced_here.get(pid, 0.0)) for pid, seconds in self.niced_here.items())
        here = min(max(0.0, niced), here)
        return BusyCores(max(0.0, normal - own + niced - here) / elapsed, here / elapsed)


def busy_cores_of_others(seconds: float = BUSY_SAMPLE_SECONDS) -> BusyCores:
    """Cores that other programs keep busy, watched for `seconds`; niced time of this session apart (those
    programs asked to yield: beside them a process is fastest spinning as alone)."""
    start = CpuClock.read()
    time.sleep(seconds)
    return CpuClock.read().busy_since(start)


def niced_self() -> bool:
    """Whether this process runs at a raised nice level (`nice make run`)."""
    return hasattr(os, "nice") and os.nice(0) > 0


def others_were_busy() -> bool:
    """Whether other programs kept `BUSY_CORES` busy when this process chose how its threads wait."""
    return busy_at_start is not None and busy_at_start.normal >= BUSY_CORES


def handed_over() -> dict | None:
    """What a training process that handed its work over to this one (`training.handover`) passed on: the wait
    to take (`wait`), what it saw (`saw`), the MLflow run to continue (`run_id`), handovers so far (`count`) and
    when the stage started (`started`, so that its `done in` counts the whole stage)."""
    return knobs.read_at_import(HANDOVER_ENV)  # set by lmtransfer itself; a bad one is refused by `knobs.check`


def choose_openmp_wait(jobs: int, others_busy=busy_cores_of_others) -> dict[str, str]:
    """How OpenMP's idle threads wait, read once when torch loads OpenMP; returns what was set.

    Left to itself, libgomp spins a waiting thread for 300,000 rounds (milliseconds) before it sleeps. A stage's
    second thread waits like that between every two parallel operations, so it holds a core all the time; beside
    any other CPU-heavy program the two fight for the cores and a stage ran 10-29 times slower. Alone, spinning a
    while is what keeps the next operation's start fast: GOMP_SPINCOUNT=50000, a sixth of libgomp's, is as fast
    alone as 10,000 (`benchmarks/cotenancy.py --alone-spins`). Beside others, threads that sleep at once
    (OMP_WAIT_POLICY=PASSIVE) keep more of the speed, most of all in fine-tuning's small operations, but alone
    they are slower (`benchmarks/cotenancy.py` measures both). So they do not spin with known co-tenants (more
    than one job), nor, when the jobs are not counted by `LMTRANSFER_JOBS`, while other programs keep
    `BUSY_CORES` busy as this process starts (`others_busy()`; not asked once torch is loaded, too late to
    matter). Niced programs of its own session yield: beside them threads spin as alone, through the gaps between
    two operations that a thread asleep would hand them. A niced program in another session does not yield
    (`autogroup`): it counts as any other. A process that a training process handed its work over to
    (`handed_over`) takes the wait it was given. Nothing is set when the user chose either variable; none of this
    changes a result, only when a thread waits."""
    global busy_at_start, chosen_wait
    for name, value in (knobs.read_at_import(CHOSEN_ENV) or {}).items():
        if os.environ.get(name) == value:  # chosen by a parent lmtransfer process, not the user: choose afresh
            del os.environ[name]
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        chosen_wait = None
        return {}
    handover = handed_over()
    if handover:
        chosen_wait = handover["wait"]
    elif jobs > 1:
        chosen_wait = "sleep"
    else:
        if not knobs.is_set(JOBS_ENV) and "torch" not in sys.modules:
            busy_at_start = others_busy()
        chosen_wait = wait_for(busy_at_start) if busy_at_start is not None else "spin"
    chosen = WAITS[chosen_wait]
    os.environ.update(chosen)
    os.environ[CHOSEN_ENV] = ",".join(f"{name}={value}" for name, value in chosen.items())
    return chosen


class NeighbourWatch:
    """Keeps looking, during training, at what other programs keep busy, and says when the wait this process's
    threads were started with (`chosen_wait`) no longer fits (`better_wait`). OpenMP reads the wait once, so the
    answer is acted on by handing the work over to a new process (`training.handover`).

    A reading every `every` seconds, on a thread of its own (`start`); once `patience` readings in a row ask
    for the same change, `wanted` names the wait to change to and `saw` what those readings saw on average."""

    def __init__(self, every: float = 1.0, patience: int = 2, clock=CpuClock.read) -> None:
        self.every, self.patience, self.clock = every, patience, clock
        self.last = clock()
        self.streak: list[tuple[str, BusyCores]] = []
        self.wanted: str | None = None
        self.saw: BusyCores | None = None
        self._stopped = threading.Event()

    def look(self) -> str | None:
        """One reading: the wait to change to, once `patience` readings in a row ask for it; else None."""
        if chosen_wait is None or self.wanted is not None:
            return self.wanted
        now = self.clock()
        busy, self.last = now.busy_since(self.last), now
        better = better_wait(chosen_wait, busy)
        kept = [entry for entry in self.streak if entry[0] == better]
        self.streak = [] if better is None else [*kept, (better, busy)]
        if len(self.streak) >= self.patience:
            seen = [entry[1] for entry in self.streak]
            self.saw = BusyCores(*(sum(values) / len(seen) for values in zip(*seen)))
            self.wanted = better
        return self.wanted

    def start(self) -> NeighbourWatch:
        def watch() -> None:
            while not self._stopped.wait(self.every) and self.look() is None:
                pass

        threading.Thread(target=watch, name="neighbour-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
