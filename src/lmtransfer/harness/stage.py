"""What every stage script shares: the project's own errors become one clear line, not a traceback."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable

from lmtransfer.core import knobs
from lmtransfer.core.errors import LmtransferError


def stage_main(name: str | Callable[[], str]) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Decorator for a stage's main(): prints `<stage>: done in N s`, or `<stage>: error: ...` and exits 1 for an
    expected problem (LMTRANSFER_DEBUG=1 keeps its traceback). `name` may be a function (`finetune_scratch@2`)."""

    def decorate(main: Callable[[], None]) -> Callable[[], None]:
        @functools.wraps(main)
        def run() -> None:
            started = time.time()
            label = name() if callable(name) else name
            try:
                knobs.check()  # a bad LMTRANSFER_* value: one line, before any work
                main()
            except LmtransferError as exc:
                if knobs.read_at_import(knobs.DEBUG):
                    raise
                print(f"{label}: error: {exc}", file=sys.stderr)
                sys.exit(1)
            except Exception as exc:
                # torchrun: a collective fails on this rank because another one stopped; its line is printed already
                lost = type(exc).__module__.startswith("torch.distributed") or any(
                    sign in str(exc) for sign in ("closed by peer", "reset by peer", "remote worker", "NCCL"))
                if int(os.environ.get("WORLD_SIZE", "1")) < 2 or not lost:
                    raise
                print(f"{label}: stopped: another process of the job ended ({type(exc).__name__})", file=sys.stderr)
                sys.exit(1)
            except KeyboardInterrupt:  # Ctrl-C: the stage's MLflow run is marked KILLED on the way out
                print(f"{label}: stopped; what earlier stages wrote is kept", file=sys.stderr)
                sys.exit(130)
            print(f"{label}: done in {time.time() - started:.1f} s", flush=True)

        return run

    return decorate
