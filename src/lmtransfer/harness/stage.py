"""What every stage script shares: expected problems become one clear line, not a traceback."""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Callable

from lmtransfer.harness.errors import LmtransferError


def stage_main(name: str | Callable[[], str]) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Decorator for a stage's main(): prints `<stage>: done in N s`, or `<stage>: error: ...` and exits 1.

    `name` may be a function, for a stage whose name comes from its arguments (`finetune_scratch@2`).
    """

    def decorate(main: Callable[[], None]) -> Callable[[], None]:
        @functools.wraps(main)
        def run() -> None:
            start = time.perf_counter()
            label = name() if callable(name) else name
            try:
                main()
                print(f"{label}: done in {time.perf_counter() - start:.1f} s", flush=True)
            except LmtransferError as exc:
                if os.environ.get("LMTRANSFER_DEBUG"):
                    raise
                print(f"{label}: error: {exc}", file=sys.stderr)
                sys.exit(1)
            except Exception as exc:
                if os.environ.get("LMTRANSFER_DEBUG") or not _lost_another_process(exc):
                    raise
                print(f"{label}: stopped: process {os.environ['RANK']} lost contact with the others (the error of the "
                      "one that failed is above)", file=sys.stderr)
                sys.exit(1)

        return run

    return decorate


def _lost_another_process(exc: Exception) -> bool:
    """Under torchrun, a collective that fails because another process ended (its own error printed already)."""
    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return False
    message = str(exc)
    return type(exc).__module__.startswith("torch.distributed") or any(
        sign in message for sign in ("closed by peer", "reset by peer", "remote worker", "NCCL communicator"))
