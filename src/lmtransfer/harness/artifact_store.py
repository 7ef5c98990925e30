"""The local store's artifact folder (`mlartifacts/`): inside this checkout and writable, checked before any work.

MLflow keeps each experiment's artifact folder as an absolute path in `mlflow.db`. A project copied with its store
(`cp -a`) then wrote every artifact of the copy into the original's `mlartifacts/`, with rc 0; and an artifact folder
that cannot be written failed with a `PermissionError` traceback after the training, its metrics never reaching
dvc.lock. So, before a stage runs: the artifact folder follows the checkout (an experiment's `mlartifacts/` of another
checkout is moved to this one's, in the store, with one line saying so; the runs already made keep theirs), a
location elsewhere is named in one line, and an artifact folder that cannot be written stops the stage in one line
(docs/guide/tracking.md).
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

from lmtransfer.core.errors import TrackingStoreError

ARTIFACTS = "mlartifacts"
DEFAULT_EXPERIMENT = "0"  # MLflow's own `Default`, which the pipeline never logs to


def _local_path(location: str) -> Path | None:
    """The folder a `file:` URI or a plain path names; None for a remote location (s3://, ...)."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if not parts.scheme:
        return Path(location)
    return None


def foreign_locations(store: Path, root: Path) -> list[tuple[str, str]]:
    """(experiment, artifact location) of the store's experiments whose local artifact folder is outside `root`."""
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT experiment_id, name, artifact_location FROM experiments").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return []  # the store's own checks name a damaged file
    found = []
    for experiment_id, name, location in rows:
        folder = _local_path(location or "")
        if str(experiment_id) == DEFAULT_EXPERIMENT or folder is None:
            continue
        if not folder.is_absolute() or not folder.resolve().is_relative_to(root.resolve()):
            found.append((name, location))
    return found


def follow_checkout(store: Path, root: Path) -> None:
    """Point each experiment whose artifacts went to another checkout's `mlartifacts/` at this one's (new runs only);
    stop in one line for a location outside this checkout that is not a `mlartifacts/` folder."""
    foreign = foreign_locations(store, root)
    other = [(name, location) for name, location in foreign if _local_path(location).name != ARTIFACTS]
    if other:
        name, location = other[0]
        raise TrackingStoreError(
            f"{store}: experiment '{name}' keeps its artifacts in {location}, outside this checkout ({root}); move "
            f"{store.name} away (the next stage builds a new store here), or point MLFLOW_TRACKING_URI at the store "
            "that experiment belongs to; nothing was run"
        )
    if not foreign:
        return
    here = (root / ARTIFACTS).as_uri()
    db = sqlite3.connect(store, timeout=30)
    try:
        with db:
            db.executemany("UPDATE experiments SET artifact_location = ? WHERE name = ?",
                           [(here, name) for name, _ in foreign])
    finally:
        db.close()
    for name, location in foreign:
        print(f"tracking: experiment '{name}' kept its artifacts in {location} (another checkout: this project was "
              f"copied); its new runs' artifacts go to {here}")


def check_artifact_store(store: Path, root: Path) -> None:
    """The local store's artifacts: in this checkout's `mlartifacts/` (`follow_checkout`), which must be writable."""
    follow_checkout(store, root)
    folder = root / ARTIFACTS
    try:
        folder.mkdir(exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as error:
        raise TrackingStoreError(
            f"{folder} cannot be written ({error.strerror or error}): the stages' MLflow artifacts (checkpoints, "
            "figures) go there; make it writable, or point MLFLOW_TRACKING_URI at a store that is; nothing was run"
        ) from None
