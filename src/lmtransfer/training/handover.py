"""Handing training over to a new process when a neighbour arrives or leaves.

How OpenMP's idle threads wait is read once, when torch loads OpenMP (`core.sharing.choose_openmp_wait`), and
the best wait depends on the neighbours: spinning a while alone or beside niced programs of its own session,
sleeping at once beside programs that do not yield. A stage keeps watching (`sharing.NeighbourWatch`);
when the neighbours change for good, it saves a resume snapshot at the next point where one is whole (a
pretraining step, a fine-tuning batch), and replaces itself
(`os.execv`: the same process id, so DVC sees one stage) with the same command under the other wait. The new
process resumes from the snapshot, bit for bit as after a kill, and continues the same MLflow run. Nothing of
this changes a result: threads, kernels and every random draw stay as they were.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import torch

from lmtransfer.core import knobs, sharing
from lmtransfer.harness import stage
from lmtransfer.training import distributed
from lmtransfer.training.resume import Snapshots

WATCH_ENV = knobs.WATCH  # 1: watch outside a pipeline stage too (the benchmark); 0: never watch
MAX_HANDOVERS = 3  # per stage run: a neighbour that comes and goes every few seconds is not chased


def neighbour_watch(snapshots: Snapshots | None, device: torch.device) -> sharing.NeighbourWatch | None:
    """A running watch where this process can act on it, else None: a pipeline stage (or `LMTRANSFER_WATCH=1`)
    on the CPU, one process, its wait chosen by lmtransfer (not by the user's variables, nor for jobs counted
    by `LMTRANSFER_JOBS` or the DVC queue), resume snapshots on (the handover resumes from one), handovers left."""
    asked = knobs.read(WATCH_ENV) or ""
    in_stage = "DVC_ROOT" in os.environ or "DVC_EXP_NAME" in os.environ
    resumable = snapshots is not None and snapshots.every > 0
    if asked == "0" or not (asked == "1" or in_stage) or not resumable or device.type != "cpu":
        return None
    if sharing.chosen_wait is None or sharing.parallel_jobs() > 1 or distributed.world().size > 1:
        return None
    if handovers_so_far() >= MAX_HANDOVERS:
        return None
    return sharing.NeighbourWatch().start()


def handovers_so_far() -> int:
    handover = sharing.handed_over()
    return handover["count"] if handover else 0


def continues_a_run() -> bool:
    """Whether this process took over a training whose MLflow run it continues: the rows before the snapshot
    are in that run already, so they are not logged again."""
    handover = sharing.handed_over()
    return bool(handover and handover.get("run_id"))


def seen_words(wait: str, saw: sharing.BusyCores) -> str:
    """What the watch saw that asks for `wait`, in the log's words."""
    cores = os.cpu_count()
    niced = f" (+{saw.niced:.1f} niced, yielding)" if saw.niced >= 0.05 else ""
    return f"other programs kept {saw.normal:.1f} of {cores} cores busy{niced}" + (
        " after the start" if wait == "sleep" else ", then fewer")


def hand_over_if_due(watch: sharing.NeighbourWatch | None, save: Callable[[], None], where: str) -> None:
    """At a point where the training can stop whole: if the watch asks for another wait, `save` the snapshot
    and become the same command under that wait (never returns then). `where` says the point, for the log."""
    if watch is None or watch.wanted is None:
        return
    wait, saw = watch.wanted, watch.saw
    seen = seen_words(wait, saw)
    print(f"\nneighbours: {seen}; handing the training over at {where} to the same command, "
          f"{sharing.WAIT_WORDS[wait]}: the result is the same", flush=True)
    watch.stop()
    save()
    handover = {"wait": wait, "saw": seen, "count": handovers_so_far() + 1, "started": stage.started, "launcher": stage.launcher_pid}
    env = dict(os.environ, **{sharing.HANDOVER_ENV: json.dumps(handover)})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
