"""What every stage script shares: expected problems become one clear line, not a traceback."""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Callable

from .errors import LmtransferError


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

        return run

    return decorate
