"""How much of its alone speed a training stage keeps when other CPU-heavy work shares the machine.

A fixed workload (the pipeline's own `pretrain` for a few steps, then `finetune` for a few epochs with the
pipeline's fine-tuning params, the default model shape, synthetic ids) runs as a stage does: it watches its
neighbours and may hand its training over to a new process (`training.handover`), timed across it. It runs
alone, then beside each neighbour (`CASES`):

* `neighbour`: another lmtransfer training process, from another checkout (a copy of this one's
  `src/` in a temporary folder), pretraining without end, with as many threads as this one;
  `finetuning-neighbour`: the same fine-tuning without end (smaller operations);
* `cpu-hog`: a plain CPU-bound program, one busy process per core;
* `short-processes`: one short process after another (each imports torch, computes for a second);
* `other-session`: the neighbour in a session of its own (`setsid`, as another terminal is);
* `late-neighbour`: the neighbour starts 10 s after the measured process, during its training;

the lmtransfer ones also under `nice -n 19` (`-niced`). The others start 5 s first, so the measured process
sees the machine busy as it starts. Two more cases run with libgomp's own default spin
(GOMP_SPINCOUNT=300000): alone, and beside a neighbour that spins so too; and one runs alone with threads
that sleep at once (`alone-passive`). Every case runs in fresh processes, the cases alternate over the
rounds, and the median is printed as the fraction of the alone speed (alone seconds / seconds beside it).
`alone` runs first and last in each round, and its median over all those runs is the reference: the
host's speed drifts between minutes, and one alone run taken in a slow minute would flatter every case.
The trained weights are hashed in each case: beside a neighbour they must be the same bytes as alone
(`same weights` says); `handovers` counts the measured process's handovers.

    python benchmarks/cotenancy.py                 # 3 rounds, about 40 minutes on 2 cores
    python benchmarks/cotenancy.py --rounds 1      # a quick look
    python benchmarks/cotenancy.py --env GOMP_SPINCOUNT=10000    # every lmtransfer process with this variable
    python benchmarks/cotenancy.py --alone-spins 10000 50000 --rounds 5    # alone only, each spin count fixed

Run it on a machine where nothing else runs: the other work is what it measures. Its last line:
`cotenancy: neighbour <f>, neighbour-niced <f>, ...`, every case of `CASES`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from results_file import REPO, Column, write_result

WATCH_ENV = "LMTRANSFER_WATCH"  # training.handover's: the measured process watches its neighbours as a stage does

VOCAB, D_MODEL, N_LAYERS, N_HEADS, D_FF, DROPOUT = 4000, 200, 4, 2, 200, 0.1
PRETRAIN_STEPS, FINETUNE_TEXTS, FINETUNE_EPOCHS = 40, 640, 4  # fine-tuning: epochs, so it can hand over
MEASURE_DIR_ENV = "COTENANCY_MEASURE_DIR"  # the measured workload's snapshots and clock, across a handover


class Case(NamedTuple):
    """A neighbour: what it runs, its nice level, whether it starts in a session of its own (`setsid`: another
    terminal) and how many seconds after the measured process it starts (0: before it, as the machine is busy)."""

    kind: str
    nice: int = 0
    own_session: bool = False
    delay: float = 0.0


LATE = 10.0  # seconds after the measured process starts that a late neighbour arrives
CASES = {
    "neighbour": Case("lmtransfer"),
    "neighbour-niced": Case("lmtransfer", 19),
    "cpu-hog": Case("hog"),
    "cpu-hog-niced": Case("hog", 19),
    "finetuning-neighbour": Case("lmtransfer-finetune"),
    "other-session": Case("lmtransfer", own_session=True),
    "other-session-niced": Case("lmtransfer", 19, own_session=True),
    "late-neighbour": Case("lmtransfer", delay=LATE),
    "late-neighbour-niced": Case("lmtransfer", 19, delay=LATE),
    "short-processes": Case("short-processes"),
}
WORKLOADS = ("pretrain", "finetune")
BEFORE_ENV = {"GOMP_SPINCOUNT": "300000"}  # libgomp's own default spin, what every stage used before
BEFORE = "alone-spin-300k"  # alone, so: the speed alone must not fall more than 3% below it
BEFORE_NEIGHBOUR = "neighbour-spin-300k"  # both sides so: the collapse this benchmark exists for
ASLEEP = "alone-passive"  # alone, threads that sleep at once: why a process alone spins a while instead
ASLEEP_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
HOG = "while True:\n    pass\n"
SHORT = ("import time, torch\n"  # one short process: imports torch, computes for about a second, exits
         "x, end = torch.randn(256, 256), time.perf_counter() + 1.0\n"
         "while time.perf_counter() < end:\n    x = torch.tanh(x @ x / 16)\n")
SHORT_LOOP = ("import subprocess, sys\n"  # a test suite or a shell loop of CLI calls: one short process after another
              "while True:\n    subprocess.run([sys.executable, '-c', sys.argv[1]])\n")


# --- the measured workload and the neighbour (child processes) --------------------------------------------


def _stream(n_tokens: int):
    import numpy as np

    return np.random.default_rng(0).integers(5, VOCAB, n_tokens).astype(np.uint16)


def _config():
    from lmtransfer.modeling.model import ModelConfig

    return ModelConfig(VOCAB, D_MODEL, N_LAYERS, N_HEADS, D_FF, DROPOUT)


def _digest(model) -> str:
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _pretrain_params(steps: int):
    from lmtransfer.core.config import PretrainParams

    return PretrainParams(max_steps=steps, warmup_steps=10, eval_every=10**9, eval_batches=1)


def measure() -> dict:
    """Seconds and weight digest of each workload, timed across processes: as a stage does, the measured process
    watches its neighbours and may hand its training over to a new one (`training.handover`), which runs this
    again and resumes from the snapshot in `MEASURE_DIR_ENV`; the clock file keeps each workload's start and end."""
    import lmtransfer  # noqa: F401 - first, as in a stage: it sets how OpenMP waits before torch loads it
    # isort: split

    from lmtransfer.classification.finetune import finetune
    from lmtransfer.modeling.model import Classifier, LanguageModel
    from lmtransfer.modeling.runtime import seed_everything, use_share_of_cores
    from lmtransfer.pretraining.training import LoopOptions, pretrain
    from lmtransfer.training.handover import handovers_so_far
    from lmtransfer.training.loop import RunOptions
    from lmtransfer.training.resume import Snapshots

    folder = Path(os.environ[MEASURE_DIR_ENV])
    clock_file = folder / "clock.json"
    clock = json.loads(clock_file.read_text()) if clock_file.exists() else {}

    def tick(key: str) -> None:
        clock.setdefault(key, time.time())
        clock_file.write_text(json.dumps(clock))

    threads = use_share_of_cores()
    result = {"threads": threads}
    seed_everything(0)
    model = LanguageModel(_config())
    stream = _stream(PRETRAIN_STEPS * 32 * 65 + 10_000)
    tick("pretrain_start")
    pretrain(model, stream, stream[:4096], _pretrain_params(PRETRAIN_STEPS),
             LoopOptions(log_every=10**9, snapshots=Snapshots("pretrain", "cotenancy", 10**9, root=folder)))
    tick("pretrain_end")
    result["pretrain"] = {"seconds": clock["pretrain_end"] - clock["pretrain_start"], "digest": _digest(model)}

    seed_everything(0)
    split = _finetune_split(FINETUNE_TEXTS)
    classifier = Classifier(_config(), 2, pooling=_finetune_params().pooling)
    tick("finetune_start")
    finetune(classifier, split, split, _finetune_params(),
             RunOptions(snapshots=Snapshots("finetune", "cotenancy", 1, root=folder)))
    tick("finetune_end")
    result["finetune"] = {"seconds": clock["finetune_end"] - clock["finetune_start"], "digest": _digest(classifier)}
    usage = resource.getrusage(resource.RUSAGE_SELF)  # where this process's CPU time went: the profile
    result["cpu"] = {"user": usage.ru_utime, "system": usage.ru_stime, "switches": usage.ru_nvcsw + usage.ru_nivcsw}
    result["handovers"] = handovers_so_far()
    return result


def _finetune_split(n_texts: int):
    """Labeled texts of random ids, lengths spread like real reviews (median 55 tokens)."""
    import numpy as np

    from lmtransfer.tokens.id_files import LabeledSplit

    generator = np.random.default_rng(1)
    lengths = np.clip(np.exp(generator.normal(np.log(55), 0.8, n_texts)).astype(int), 4, 256)
    ids = generator.integers(5, VOCAB, int(lengths.sum())).astype(np.uint16)
    return LabeledSplit(ids, np.concatenate([[0], np.cumsum(lengths)]), generator.integers(0, 2, n_texts))


def _finetune_params():
    """The pipeline's fine-tuning params, `FINETUNE_EPOCHS` epochs: short texts (`max_len` 64), so small operations."""
    from lmtransfer.classification.config import FinetuneParams

    return FinetuneParams(epochs=FINETUNE_EPOCHS)


def finetuning_neighbour() -> None:
    """Fine-tune without end, as another checkout's fine-tuning stage would, until killed."""
    import lmtransfer  # noqa: F401 - first, as in a stage
    # isort: split

    from lmtransfer.classification.finetune import finetune
    from lmtransfer.modeling.model import Classifier
    from lmtransfer.modeling.runtime import use_share_of_cores

    use_share_of_cores()
    split = _finetune_split(FINETUNE_TEXTS)
    classifier = Classifier(_config(), 2, pooling=_finetune_params().pooling)
    while True:
        finetune(classifier, split, split, _finetune_params())


def neighbour() -> None:
    """Pretrain without end, as another checkout's pretraining stage would, until killed."""
    import lmtransfer  # noqa: F401 - first, as in a stage
    # isort: split

    from lmtransfer.modeling.model import LanguageModel
    from lmtransfer.modeling.runtime import use_share_of_cores
    from lmtransfer.pretraining.training import LoopOptions, pretrain

    use_share_of_cores()
    stream = _stream(2_000_000)
    pretrain(LanguageModel(_config()), stream, stream[:4096], _pretrain_params(10**9), LoopOptions(log_every=10**9))


# --- the conductor ------------------------------------------------------------------------------------------


def _env(extra: dict[str, str], src: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, **extra, TQDM_DISABLE="1")
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def start_neighbours(case: Case, checkout: Path, extra: dict[str, str]) -> list[subprocess.Popen]:
    """The case's neighbour processes, started now: in this session, or in one of their own (`setsid`); each
    leads a process group, so that `stop` takes what it started too."""
    if case.kind == "hog":
        commands, env = [[sys.executable, "-c", HOG] for _ in range(os.cpu_count() or 1)], dict(os.environ)
    elif case.kind == "short-processes":
        commands, env = [[sys.executable, "-c", SHORT_LOOP, SHORT]], dict(os.environ)
    else:
        commands = [[sys.executable, str(checkout / "benchmarks" / "cotenancy.py"), f"--{case.kind}"]]
        env = _env(extra, checkout / "src")
    return [subprocess.Popen(["nice", "-n", str(case.nice), *command], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=case.own_session,
                             process_group=None if case.own_session else 0) for command in commands]


def stop(processes: list[subprocess.Popen]) -> None:
    """The neighbours and whatever they started (a short-process loop's current child) killed."""
    for process in processes:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def run_measure(extra: dict[str, str], case: Case | None = None, checkout: Path | None = None) -> dict:
    """The measured workload in a fresh process, beside `case`'s neighbours: started first (5 s before, past
    their start-up) or `case.delay` seconds after it."""
    neighbours = start_neighbours(case, checkout, extra) if case and not case.delay else []
    folder = tempfile.mkdtemp(prefix="cotenancy-measure-")
    try:
        if neighbours:
            time.sleep(5)  # past the neighbour's start-up: imports, model, first steps
        measured = subprocess.Popen([sys.executable, __file__, "--measure"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True,
                                    env=_env({**extra, MEASURE_DIR_ENV: folder, WATCH_ENV: "1"}))
        if case and case.delay:
            try:
                measured.wait(timeout=case.delay)
            except subprocess.TimeoutExpired:
                neighbours = start_neighbours(case, checkout, extra)
        out, err = measured.communicate()
    finally:
        stop(neighbours)
        shutil.rmtree(folder, ignore_errors=True)
    if measured.returncode != 0:
        sys.exit(f"the measured workload failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def run_case(case: str, checkout: Path, extra: dict[str, str]) -> dict:
    if case in (BEFORE, BEFORE_NEIGHBOUR):
        extra = {**extra, **BEFORE_ENV}
    if case == ASLEEP:
        extra = {**extra, **ASLEEP_ENV}
    if case in ("alone", BEFORE, ASLEEP):
        return run_measure(extra)
    return run_measure(extra, CASES["neighbour" if case == BEFORE_NEIGHBOUR else case], checkout)


def copy_checkout(target: Path) -> Path:
    """Another checkout: this one's `src/` and `benchmarks/` (what the neighbour runs), copied."""
    for folder in ("src", "benchmarks"):
        shutil.copytree(REPO / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__", "results"))
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in every lmtransfer process, measured and neighbour (e.g. OMP_WAIT_POLICY=PASSIVE)")
    parser.add_argument("--alone-spins", nargs="+", type=int, metavar="ROUNDS",
                        help="instead: the workload alone under each GOMP_SPINCOUNT, side by side, no neighbour")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # the measured child
    parser.add_argument("--lmtransfer", action="store_true", help=argparse.SUPPRESS)  # the neighbours, by kind
    parser.add_argument("--lmtransfer-finetune", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure()))
        return
    if args.lmtransfer:
        neighbour()
        return
    if args.lmtransfer_finetune:
        finetuning_neighbour()
        return
    extra = dict(item.split("=", 1) for item in args.env)
    signal.signal(signal.SIGTERM, _terminated)
    started = time.perf_counter()
    if args.alone_spins:
        alone_spins(args.alone_spins, args.rounds, extra, started)
        return
    asleep = [] if extra else [ASLEEP]  # with a variable of the user's in every process, it would be `alone` again
    results: dict[str, list[dict]] = {case: [] for case in ["alone", BEFORE, *asleep, BEFORE_NEIGHBOUR, *args.cases]}
    with tempfile.TemporaryDirectory(prefix="lmtransfer-neighbour-") as folder:
        checkout = copy_checkout(Path(folder))
        for round_ in range(1, args.rounds + 1):
            for case in [*results, "alone"]:  # alone first and last: the reference brackets the round's cases
                results[case].append(run_case(case, checkout, extra))
                print(f"round {round_}/{args.rounds} {case:<20}" + "".join(
                    f"  {w} {results[case][-1][w]['seconds']:6.1f} s" for w in WORKLOADS), flush=True)
    report(results, extra, args.rounds, time.perf_counter() - started)


def alone_spins(spins: list[int], rounds: int, extra: dict[str, str], started: float) -> None:
    """The workload alone under each spin count, the counts alternating over the rounds: which spin is fastest
    alone, where the host's speed drifts between minutes (medians; the first count is the reference)."""
    seconds: dict[int, list[tuple[float, float]]] = {spin: [] for spin in spins}
    for round_ in range(1, rounds + 1):
        for spin in spins:
            run = run_measure({**extra, "GOMP_SPINCOUNT": str(spin)})
            seconds[spin].append(tuple(run[w]["seconds"] for w in WORKLOADS))
            print(f"round {round_}/{rounds} GOMP_SPINCOUNT={spin:<8}" + "".join(
                f"  {w} {s:6.1f} s" for w, s in zip(WORKLOADS, seconds[spin][-1])), flush=True)
    medians = {spin: [statistics.median(run[i] for run in runs) for i in range(len(WORKLOADS))]
               for spin, runs in seconds.items()}
    reference = sum(medians[spins[0]])
    rows = [[f"GOMP_SPINCOUNT={spin}", *[round(m, 2) for m in medians[spin]], round(sum(medians[spin]), 2),
             round(reference / sum(medians[spin]), 3)] for spin in spins]
    columns = [Column("spin"), *[Column(f"{w} s", ".2f") for w in WORKLOADS], Column("total s", ".2f"),
               Column("speed vs first", ".3f")]
    for row in [[column.name for column in columns], *rows]:
        print("".join(_cell(cell, column, first=i == 0) for i, (cell, column) in enumerate(zip(row, columns))))
    write_result("cotenancy-alone-spins", columns, rows, seconds=time.perf_counter() - started,
                 notes=f"alone, no watch (each spin fixed); median of {rounds} rounds, the spin counts alternating")


def _terminated(signum: int, frame) -> None:
    """A conductor killed with SIGTERM (`kill`, `pkill`) stops the case's neighbours on its way out (`run_measure`'s
    finally): left running, a busy loop would slow whatever is measured next on the machine."""
    raise SystemExit(128 + signum)


def _median(runs: list[dict], *keys: str) -> float:
    def value(run: dict) -> float:
        for key in keys:
            run = run[key]
        return run
    return statistics.median(value(run) for run in runs)


def _cell(value, column: Column, first: bool) -> str:
    text = format(value, column.format) if column.format and not isinstance(value, str) else str(value)
    return text.ljust(22) if first else text.rjust(max(len(column.name), 8) + 2)


def report(results: dict[str, list[dict]], extra: dict[str, str], rounds: int, elapsed: float) -> None:
    """The table (medians over the rounds), its result file, and the summary lines."""
    threads = "/".join(str(t) for t in sorted({run["threads"] for runs in results.values() for run in runs}))
    alone = {w: _median(results["alone"], w, "seconds") for w in WORKLOADS}
    alone_digests = {" ".join(run[w]["digest"] for w in WORKLOADS) for run in results["alone"]}
    columns = [Column("case"), *[column for w in WORKLOADS for column in (Column(f"{w} s", ".1f"),
                                                                             Column(f"{w} fraction", ".2f"))],
               Column("fraction", ".2f"), Column("CPU s", ".1f"), Column("system %", ".0f"),
               Column("switches", ",.0f"), Column("handovers", ".0f"), Column("same weights")]
    rows, fractions = [], {}
    for case, runs in results.items():
        medians = {w: _median(runs, w, "seconds") for w in WORKLOADS}
        fractions[case] = sum(alone.values()) / sum(medians.values())
        user, system = _median(runs, "cpu", "user"), _median(runs, "cpu", "system")
        digests = {" ".join(run[w]["digest"] for w in WORKLOADS) for run in runs}
        same = "yes" if len(alone_digests) == 1 and digests == alone_digests else "NO"
        per_workload = [cell for w in WORKLOADS for cell in (round(medians[w], 1), round(alone[w] / medians[w], 2))]
        rows.append([case, *per_workload, round(fractions[case], 2), round(user + system, 1),
                     round(100 * system / (user + system)), round(_median(runs, "cpu", "switches")),
                     round(_median(runs, "handovers")), same])
    print(f"\n{os.cpu_count()} cores, {threads} thread(s) per lmtransfer process; median of {rounds} rounds; "
          "fraction = alone seconds / seconds beside it; CPU s, system %, switches: the measured process's"
          + (f"; {' '.join(f'{k}={v}' for k, v in extra.items())}" if extra else ""))
    for row in [[column.name for column in columns], *rows]:
        print("".join(_cell(cell, column, first=i == 0) for i, (cell, column) in enumerate(zip(row, columns))))
    name = "cotenancy" if not extra else "cotenancy-" + "-".join(f"{k}-{v}" for k, v in extra.items()).lower()
    write_result(name, columns, rows, seconds=elapsed, notes=f"{threads} thread(s) per process; median of {rounds} "
                 "rounds; " + (" ".join(f"{k}={v}" for k, v in extra.items()) or "the default settings"))
    print(f"alone: {1 / fractions[BEFORE]:.2f} of the speed alone with libgomp's default spin (GOMP_SPINCOUNT=300000)")
    print("cotenancy: " + ", ".join(f"{case} {fractions[case]:.2f}" for case in results if case in CASES))


if __name__ == "__main__":
    main()
