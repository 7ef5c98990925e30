"""What every stage script shares: expected problems become one clear line, not a traceback."""

from __future__ import annotations

import errno
import functools
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from lmtransfer.core import knobs, sharing
from lmtransfer.core.errors import LmtransferError
from lmtransfer.harness.process_exit import end_after
from lmtransfer.harness.tracking import launching_dvc

started: float | None = None  # time.time() when this stage started, in the process it was handed over from if so


def stage_main(name: str | Callable[[], str]) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Decorator for a stage's main(): prints `<stage>: done in N s`, or `<stage>: error: ...` and exits 1. In a
    stage script run as a program, the process then ends at once (`harness.process_exit`).

    `name` may be a function, for a stage whose name comes from its arguments (`finetune_scratch@2`).
    """

    def decorate(main: Callable[[], None]) -> Callable[[], None]:
        program = main.__module__ == "__main__"  # a stage script run as a program, not a test calling main()

        @functools.wraps(main)
        def run() -> None:
            if program:
                end_after(run_main)
            run_main()

        def run_main() -> None:
            global started
            handover = sharing.handed_over() or {}  # a training handed over (`training.handover`): the stage goes on
            started = handover.get("started") or time.time()
            label = name() if callable(name) else name
            for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(signum, _terminated)
            try:
                watch_launcher(handed_over=handover)  # inside: a dvc already gone stops the stage here
                knobs.check()  # a bad LMTRANSFER_* value: one line, before any work
                main()
                print(f"{label}: done in {time.time() - started:.1f} s", flush=True)
            except KeyboardInterrupt as stopped:  # Terminated, or a KeyboardInterrupt raised before the handler
                signum = getattr(stopped, "signum", signal.SIGINT)
                why = LAUNCHER_GONE if launcher_gone.is_set() else signal.Signals(signum).name
                print(f"{label}: stopped ({why}); what earlier stages wrote is kept", file=sys.stderr)
                sys.exit(128 + signum)
            except LmtransferError as exc:
                if knobs.read_at_import(knobs.DEBUG):
                    raise
                _stop(f"{label}: error: {exc}")
            except Exception as exc:
                if knobs.read_at_import(knobs.DEBUG):
                    raise
                no_room = _no_room_to_write(exc)
                if no_room:
                    _stop(f"{label}: error: {no_room}; free some space and run it again (what earlier stages wrote is "
                          "kept)")
                if not _lost_another_process(exc):
                    raise
                _stop(f"{label}: stopped: process {os.environ['RANK']} lost contact with the others (the error of the "
                      "one that failed is above)")

        return run

    return decorate


class Terminated(KeyboardInterrupt):
    """SIGTERM (a stopped `dvc repro`), SIGHUP (a closed terminal) or SIGINT (Ctrl-C): unwound alike, so the stage's
    MLflow run is marked KILLED and its files closed before the process ends, with one line instead of a
    traceback."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _terminated(signum: int, frame) -> NoReturn:
    raise Terminated(signum)


LAUNCHER_GONE = "the dvc process that started it ended"
launcher_gone = threading.Event()


launcher_pid: int | None = None  # the dvc this stage runs under: a training handing over passes it on


def watch_launcher(every: float = 1.0, handed_over: dict | None = None) -> threading.Thread | None:
    """A stage whose `dvc` is gone (killed alone, not with its process group) has no one to record its outputs
    in dvc.lock: it stops as on SIGTERM (its snapshot kept for the rerun) instead of training on as an orphan.
    A process a training handed over to (`handed_over`) that ran under a dvc now gone stops at once: the dvc
    may have ended between the last look and the handover."""
    global launcher_pid
    launcher = launching_dvc()
    if launcher is None:
        if (handed_over or {}).get("launcher"):
            _stop_as_launcher_gone()
        return None
    launcher_pid = launcher.pid

    def watch() -> None:
        while launcher.is_running():
            time.sleep(every)
        _stop_as_launcher_gone()

    thread = threading.Thread(target=watch, name="watch-dvc", daemon=True)
    thread.start()
    return thread


def _stop_as_launcher_gone() -> None:
    """SIGTERM to this process, marked as the launcher's end: the stage unwinds as on SIGTERM and says why."""
    launcher_gone.set()
    os.kill(os.getpid(), signal.SIGTERM)


def _stop(line: str) -> NoReturn:
    """The stage's one line on standard error, and exit status 1."""
    print(line, file=sys.stderr)
    sys.exit(1)


ROOM = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
        errno.EFBIG: "the file-size limit (ulimit -f) is reached"}


def _no_room_to_write(exc: BaseException) -> str | None:
    """A write that failed for want of room, in one line naming what could not be written; else None. MLflow's
    SQLite store reports a full disk or a file-size limit as `disk I/O error` deep in a chained traceback."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in ROOM:
            return f"could not write {seen.filename or 'a file'}: {ROOM[seen.errno]}"
        if isinstance(seen, sqlite3.OperationalError) and any(
                sign in str(seen) for sign in ("disk I/O error", "database or disk is full")):
            from lmtransfer.harness.tracking import tracking_uri

            return (f"could not write the MLflow store {tracking_uri()} ({seen}): the disk is full, a file-size "
                    "limit is reached, or the disk failed")
        seen = seen.__cause__ or seen.__context__
    return None


def _lost_another_process(exc: Exception) -> bool:
    """Under torchrun, a collective that fails because another process ended (its own error printed already)."""
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return False
    message = str(exc)
    return type(exc).__module__.startswith("torch.distributed") or any(
        sign in message for sign in ("closed by peer", "reset by peer", "remote worker", "NCCL communicator"))
