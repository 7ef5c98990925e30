"""What every stage script shares: known errors become one clear line, not a traceback."""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Callable

from .config import ConfigError
from .data.prepare import EmptySplitError
from .data.sources import DataSourceError
from .tokenizer import TokenizerError

EXPECTED_ERRORS = (ConfigError, DataSourceError, EmptySplitError, TokenizerError, FileNotFoundError, ValueError)


def stage_main(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Decorator for a stage's main(): expected problems print `<stage>: error: ...` and exit 1."""

    def decorate(main: Callable[[], None]) -> Callable[[], None]:
        @functools.wraps(main)
        def run() -> None:
            start = time.perf_counter()
            try:
                main()
                print(f"{name}: done in {time.perf_counter() - start:.1f} s", flush=True)
            except EXPECTED_ERRORS as exc:
                if os.environ.get("LMTRANSFER_DEBUG"):
                    raise
                print(f"{name}: error: {exc}", file=sys.stderr)
                sys.exit(1)

        return run

    return decorate
