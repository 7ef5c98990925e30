"""The pinned-file cache: an unwritable cache is refused in one line naming LMTRANSFER_CACHE_DIR."""

import hashlib
import os

import pytest

from lmtransfer.core.errors import DataSourceError
from lmtransfer.data.pinned import cache_dir, fetch_pinned


def test_a_file_is_fetched_once_into_the_cache_and_checked(tmp_path):
    digest = hashlib.sha256(b"pinned bytes").hexdigest()
    path = fetch_pinned("file.bin", digest, "a file", lambda to: to.write_bytes(b"pinned bytes"), tmp_path / "cache")
    assert path.read_bytes() == b"pinned bytes"
    assert path == fetch_pinned("file.bin", digest, "a file", lambda to: pytest.fail("again"), tmp_path / "cache")


@pytest.mark.parametrize("block", [lambda cache: cache.write_text("not a folder"), pytest.param(
    lambda cache: cache.mkdir(mode=0o555), marks=pytest.mark.skipif(os.geteuid() == 0, reason="root writes anyway"))],
    ids=["a file", "read-only"])
def test_a_cache_that_cannot_hold_the_file_names_the_variable_to_set(tmp_path, block):
    cache = tmp_path / "cache"
    block(cache)
    try:
        with pytest.raises(DataSourceError) as info:
            fetch_pinned("file.bin", "0" * 64, "a file", lambda to: to.write_bytes(b"x"), cache)
    finally:
        cache.chmod(0o755)
    assert "LMTRANSFER_CACHE_DIR" in str(info.value)
    assert not cache.is_file() or str(info.value).startswith(f"the dataset cache {cache} cannot hold file.bin")


def test_the_cache_folder_follows_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("LMTRANSFER_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert cache_dir() == tmp_path / "elsewhere"
