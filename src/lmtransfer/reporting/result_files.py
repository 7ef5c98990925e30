"""The result files the commands read: a damaged one is named, with how to get it back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmtransfer.core.errors import LmtransferError
from lmtransfer.core.io import how_to_produce, require_file


class ResultFileError(LmtransferError, ValueError):
    pass


def remedy(path: Path) -> str:
    return (f"rerun the stage that writes it ({how_to_produce(path)} reruns it once the file changed), or restore "
            f"the committed one (git checkout -- {path})")


def read_result_json(path: str | Path, what: str) -> Any:
    """`path` parsed as JSON; missing, not UTF-8 or not JSON: one line naming the file."""
    path = require_file(path, what)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{path}: {what}, not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}); "
                              f"{remedy(path)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultFileError(f"{path}: {what}, cannot be read ({exc}); {remedy(path)}") from None


@contextmanager
def reading(path: str | Path, what: str) -> Iterator[None]:
    """Valid JSON without the keys a command reads: named, not a KeyError."""
    try:
        yield
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ResultFileError(f"{path}: {what}, without what this command reads ({type(exc).__name__}: {exc}); "
                              f"{remedy(Path(path))}") from None
