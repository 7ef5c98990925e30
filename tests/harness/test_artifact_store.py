"""The local store's artifact folder follows the checkout (issue 71: a copied project wrote every artifact into the
original's `mlartifacts/`, rc 0), and one that cannot be written stops before any work."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from lmtransfer.core.errors import TrackingStoreError
from lmtransfer.harness.artifact_store import check_artifact_store
from lmtransfer.harness.tracking_store import ensure_store


def _store_with(tmp_path: Path, location: str) -> Path:
    """A project folder whose store holds one experiment keeping its artifacts at `location`."""
    root = tmp_path / "copy"
    root.mkdir()
    store = ensure_store(root / "mlflow.db")
    db = sqlite3.connect(store)
    with db:
        db.execute("INSERT INTO experiments (name, artifact_location, lifecycle_stage) VALUES (?, ?, 'active')",
                   ("lmtransfer", location))
    db.close()
    return root


def _locations(store: Path) -> dict[str, str]:
    db = sqlite3.connect(store)
    try:
        return dict(db.execute("SELECT name, artifact_location FROM experiments WHERE name != 'Default'"))
    finally:
        db.close()


@pytest.mark.slow
def test_a_copied_store_sends_new_artifacts_to_this_checkout_and_says_so(tmp_path, capsys):
    original = (tmp_path / "original" / "mlartifacts").as_uri()
    root = _store_with(tmp_path, original)
    check_artifact_store(root / "mlflow.db", root)
    assert _locations(root / "mlflow.db") == {"lmtransfer": (root / "mlartifacts").as_uri()}
    note = capsys.readouterr().out
    assert note.count("\n") == 1 and f"kept its artifacts in {original}" in note and "copied" in note
    check_artifact_store(root / "mlflow.db", root)  # settled: nothing more to say
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_a_store_in_its_own_checkout_is_left_as_it_is(tmp_path, capsys):
    root = _store_with(tmp_path, (tmp_path / "copy" / "mlartifacts").as_uri())
    before = (root / "mlflow.db").read_bytes()
    check_artifact_store(root / "mlflow.db", root)
    assert (root / "mlflow.db").read_bytes() == before and capsys.readouterr().out == ""


@pytest.mark.slow
def test_artifacts_kept_elsewhere_than_a_checkout_are_named_in_one_line(tmp_path):
    root = _store_with(tmp_path, (tmp_path / "shared" / "artifacts").as_uri())
    with pytest.raises(TrackingStoreError) as stopped:
        check_artifact_store(root / "mlflow.db", root)
    message = str(stopped.value)
    assert "\n" not in message and "experiment 'lmtransfer' keeps its artifacts in" in message
    assert "outside this checkout" in message and "nothing was run" in message


def test_an_artifact_folder_that_cannot_be_written_stops_before_any_work(tmp_path):
    root = _store_with(tmp_path, (tmp_path / "copy" / "mlartifacts").as_uri())
    (root / "mlartifacts").write_text("a file where the folder goes")  # chmod would not stop root
    with pytest.raises(TrackingStoreError) as stopped:
        check_artifact_store(root / "mlflow.db", root)
    assert str(stopped.value).startswith(f"{root / 'mlartifacts'} cannot be written (")
    shutil.rmtree(root)
