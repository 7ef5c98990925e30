"""Atomic file writes (a temporary sibling renamed into place: a killed stage leaves no half-written file), and
their readers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmtransfer.core.errors import MissingOutputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; move it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600
        os.replace(tmp, path)
    except OSError as error:  # a failed write() names no file: name the one being written
        if error.filename in (None, str(tmp)) and error.errno is not None:
            raise OSError(error.errno, error.strerror, str(path)) from error
        raise
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Build a directory beside `path` and swap it in only when complete."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
        old = path.with_name(f".{path.name}.old")
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n")


def write_timings(path: str | Path, data: Any) -> None:
    """Timings are not results: one that cannot be written costs a line on standard error, never the stage."""
    try:
        write_json(path, data)
    except OSError as error:
        print(f"could not write {path} ({error.strerror or error}): timings are not results, so the stage's "
              "outputs stand", file=sys.stderr, flush=True)


def write_tsv(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Rows of equal keys as a TSV with a header; floats to 6 significant digits."""
    if not rows:
        raise ValueError(f"{path}: no rows to write")
    lines = ["\t".join(rows[0])]
    lines += ["\t".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in (row[k] for k in rows[0]))
              for row in rows]
    write_text(path, "\n".join(lines) + "\n")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_tsv(path: str | Path) -> list[dict[str, str]]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:] if line]


def how_to_produce(path: str | Path) -> str:
    """The command that makes a missing pipeline output (translation's for its files)."""
    if any(folder.name == "translation" and (folder / "dvc.yaml").is_file() for folder in Path(path).resolve().parents):
        return "`make run-translation`, or `dvc repro translation/dvc.yaml`"
    return "`make run`, or `dvc repro`"


def require_file(path: str | Path, what: str) -> Path:
    """Fail early, naming the file and what produces it, instead of deep inside a stage."""
    path = Path(path)
    if not path.exists():
        raise MissingOutputError(f"{path}: {what} not found (run the stage that produces it: {how_to_produce(path)})")
    return path


def sha256_of(path: str | Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
