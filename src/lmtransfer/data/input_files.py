"""Files that params.yaml names: where they are (a relative path from the working directory, then from DVC_ROOT,
as `dvc exp run --temp`'s copy lacks git-ignored files), and a record of their bytes."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from lmtransfer.core.errors import InputFileError
from lmtransfer.core.io import sha256_of


def resolve_input(path: str, key: str) -> Path:
    """The file `key` (e.g. `pretrain.init_from`) names, checked to exist and hold bytes."""
    candidate = Path(path).expanduser()
    if not candidate.is_absolute() and not candidate.exists() and os.environ.get("DVC_ROOT"):
        rooted = Path(os.environ["DVC_ROOT"]) / candidate
        if rooted.exists():
            candidate = rooted
    if not candidate.is_file():
        if candidate.is_dir():
            what = "is a directory, not a file"
        elif candidate.exists():
            what = "is not a regular file (a pipe, socket or device): it can be read only once; save it to a file"
        elif candidate.is_symlink():
            what = f"is a symbolic link to {os.readlink(candidate)}, which {_dead_end(candidate)}"
        else:
            what = "file not found"
        raise InputFileError(f"{path}: {what} (set by {key})")
    if candidate.stat().st_size == 0:
        raise InputFileError(f"{path}: the file is empty (set by {key})")
    return candidate


def _dead_end(link: Path) -> str:
    try:
        os.stat(link)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "leads back to itself (a loop of links)"
    return "does not exist (a broken link)"


def manifest_entry(key: str, given: str, path: Path) -> dict[str, Any]:
    """What validate records of an external file, so editing it reruns the stage that reads it."""
    return {"key": key, "path": given, "bytes": path.stat().st_size, "sha256": sha256_of(path)}
