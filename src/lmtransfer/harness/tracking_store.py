"""The MLflow store: where it is, and the local one (`mlflow.db`) created atomically and checked before use.

The store lives at the repository root (SQLite `mlflow.db` + `mlartifacts/`).
DVC sets DVC_ROOT to the main repository even for `dvc exp run --temp` and
queued runs, so those land in the same store instead of a temp copy DVC
deletes. `MLFLOW_TRACKING_URI` overrides everything, e.g. a shared `mlflow server`
(docs/guide/scale.md, "Beyond one machine"): then no local store is made, and the server must answer.

MLflow builds a new SQLite store by running some forty schema migrations in place,
which takes about a second. A process killed meanwhile used to leave a half-migrated
file on which every later stage failed with a long double traceback
(`table _alembic_tmp_... already exists`). So the store is built under a temporary
name and linked into place only once complete; a store found half-migrated anyway
(an older version of this tool, an interrupted `mlflow db upgrade`) is set aside and
rebuilt when it can be read and holds no run, and named in one line when it holds runs or cannot be
read (a truncated store may still hold them).

A tracking server (`MLFLOW_TRACKING_URI=http://...`) is only checked to accept
connections: MLflow's client retries a refused request for minutes (7 retries,
exponential backoff) before it fails with a traceback.
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import os
import socket
import sqlite3
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

from lmtransfer.core import knobs
from lmtransfer.core.errors import TrackingStoreError

STORE_NAME = "mlflow.db"
BUILDING_PREFIX = f".{STORE_NAME}.building-"  # + pid-nonce: a store under construction


def project_root() -> Path:
    if os.environ.get("DVC_ROOT"):
        return Path(os.environ["DVC_ROOT"]).resolve()
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        return Path(top).resolve()
    except (OSError, subprocess.CalledProcessError):
        return Path.cwd().resolve()


def tracking_uri(root: Path | None = None) -> str:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(root or project_root()) / STORE_NAME}"


def usable_tracking_uri(root: Path | None = None) -> str:
    """`tracking_uri`, with the local store built or checked first, or a tracking server checked to answer."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        from lmtransfer.harness.artifact_store import check_artifact_store

        root = root or project_root()
        check_artifact_store(ensure_store(root / STORE_NAME), root)
    elif uri.startswith(("http://", "https://")):
        check_server(uri)
    return tracking_uri(root)


def artifact_location(root: Path | None = None) -> str:
    return ((root or project_root()) / "mlartifacts").as_uri()


def quiet_mlflow_logs() -> None:
    """MLflow's chatter off. Its SQLite layer also logs every database error with a traceback before it raises
    it again: the stage reports that exception in one line (a full disk) or with its traceback (a bug), so the
    logged copy is dropped, unless LMTRANSFER_DEBUG asks for everything."""
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.tracking.fluent", "mlflow.store"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if not knobs.read_at_import(knobs.DEBUG):
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def ensure_store(path: Path) -> Path:
    """Make sure `path` is a complete MLflow SQLite store that this process can write (building it if absent);
    returns `path`. A store that fails a check is never written to: the stage stops before any work."""
    _remove_dead_builds(path.parent)
    if path.exists():
        problem = store_problem(path)
        if problem is None:
            _check_writable(path)
            return path
        if path.is_dir():  # no SQLite file, so no `.recover` or upgrade to advise
            raise TrackingStoreError(f"{path} is {problem}: move it away, and the next stage builds a new store there")
        runs = _runs_it_holds(path)
        if runs:
            remedy = (f"back it up and run `mlflow db upgrade sqlite:///{path}`, or move it away to start a new store"
                      if _upgradable(problem) else
                      f"move it away to start a new store, or restore it from a backup (`sqlite3 {path} .recover` "
                      "may save its runs)")
            raise TrackingStoreError(f"{path} is {problem}; it {runs}, so it is left as it is: {remedy}")
        aside = path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(path, aside)
        print(f"tracking: {path.name} was {problem} and held no run; set aside as {aside.name}, building a new one")
    _build(path)
    return path


def _upgradable(problem: str) -> bool:
    """Whether `mlflow db upgrade` is the cure: a store left at an older schema or mid-migration, not a damaged file."""
    return problem.startswith(("half-migrated", "at schema"))


def _check_writable(path: Path) -> None:
    """Stop in one line when the store cannot be written (a read-only file, folder or mount): a write inside a
    transaction that is rolled back, so nothing changes. A store locked by a concurrent stage passes."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=5, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("CREATE TABLE _lmtransfer_write_check (x)")
            db.execute("ROLLBACK")
        finally:
            db.close()
    except sqlite3.OperationalError as error:
        if "locked" in str(error) or "busy" in str(error):
            return
        raise TrackingStoreError(
            f"{path} cannot be written ({error}): make it and its folder writable, or point MLFLOW_TRACKING_URI at a "
            "store that is; nothing was run") from None


def check_server(uri: str, timeout: float = 5.0, answer_timeout: float = 60.0) -> None:
    """Stop in one line, before training starts, when nothing accepts connections at the server's address, or when
    the server answers but cannot read its backend store (its database down): MLflow's client would retry each call
    for minutes, then end in a traceback."""
    parts = urlsplit(uri)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        raise TrackingStoreError(
            f"MLFLOW_TRACKING_URI={uri}: no tracking server answers at {host}:{port} ({error}); start it "
            f"(docs/guide/scale.md, \"Beyond one machine\") or unset MLFLOW_TRACKING_URI to log to the local {STORE_NAME}"
        ) from None
    problem = _server_store_problem(uri, answer_timeout)
    if problem:
        raise TrackingStoreError(
            f"MLFLOW_TRACKING_URI={uri}: the tracking server answers but cannot read its store ({problem}); check its "
            f"backend database (the server's log says why), or unset MLFLOW_TRACKING_URI to log to the local "
            f"{STORE_NAME}; nothing was run") from None


def _server_store_problem(uri: str, timeout: float) -> str | None:
    """What a request that reads the server's backend store gets, once and without retries, when it is a server
    error (HTTP 5xx) or no answer in `timeout` seconds; None otherwise (a missing experiment's 404 is an answer)."""
    import urllib.error
    import urllib.request

    probe = f"{uri.rstrip('/')}/api/2.0/mlflow/experiments/get-by-name?experiment_name=lmtransfer-store-check"
    try:
        with urllib.request.urlopen(probe, timeout=timeout):
            return None
    except urllib.error.HTTPError as error:
        if error.code < 500:
            return None
        body = error.read(2000).decode("utf-8", "replace").strip().splitlines()
        return f"HTTP {error.code}" + (f": {body[0][:200]}" if body else "")
    except (OSError, ValueError) as error:  # no answer in time, a connection dropped
        return f"no answer to a request in {timeout:.0f} s: {error}"


HOT_JOURNAL = getattr(sqlite3, "SQLITE_READONLY_ROLLBACK", 776)  # a read-only open met a journal to roll back


def _read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the store. A process killed in the middle of a write leaves a hot journal that
    SQLite rolls back on the next open, which a read-only connection cannot do; that recovery (what MLflow's own
    open would do) runs first, through one read-write open."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1")
        return db
    except sqlite3.OperationalError as error:
        if getattr(error, "sqlite_errorcode", None) != HOT_JOURNAL:
            raise
    recovering = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
    try:
        recovering.execute("SELECT 1 FROM sqlite_master LIMIT 1")
    finally:
        recovering.close()
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def store_problem(path: Path) -> str | None:
    """None for a complete, undamaged store at MLflow's current schema, else what is wrong with it, in words."""
    if path.is_dir():
        return "a directory, not an MLflow store (a file)"
    try:
        with _read_only(path) as db:
            tables = _table_names(db)
            damage = db.execute("PRAGMA quick_check(1)").fetchone()[0]
            version = db.execute("SELECT version_num FROM alembic_version").fetchone() if (
                "alembic_version" in tables) else None
    except sqlite3.DatabaseError as error:
        return f"not a readable SQLite database ({error})"
    if damage != "ok":
        return f"damaged (SQLite's integrity check: {damage})"
    if any(name.startswith("_alembic_tmp_") for name in tables):
        return "half-migrated (an interrupted schema migration left temporary tables)"
    if version is None:
        return "not a complete MLflow store (no schema version)"
    missing = sorted({"experiments", "runs", "metrics", "params", "tags"} - tables)
    if missing:
        return f"not a complete MLflow store (no {', '.join(missing)} table)"
    latest = _latest_schema_revision()
    if latest and version[0] != latest:
        return f"at schema {version[0]}, not the {latest} this MLflow needs (an interrupted or pending migration)"
    return None


def _table_names(db: sqlite3.Connection) -> set[str]:
    return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _latest_schema_revision() -> str | None:
    """The schema revision a store of the installed MLflow is at: its one migration script that no other one revises
    (alembic's head). Read from the scripts' text: alembic imports them, and they import MLflow, 1.5 s of every
    `dvc repro` (validate checks the store first). None when it cannot be told: MLflow still checks the schema
    itself when a stage opens the store."""
    spec = importlib.util.find_spec("mlflow")  # where it is, not importing it
    if spec is None or spec.origin is None:
        return None
    revisions: set[str] = set()
    revised: set[str] = set()
    try:
        for script in (Path(spec.origin).parent / "store" / "db_migrations" / "versions").glob("*.py"):
            for node in ast.parse(script.read_text(encoding="utf-8")).body:
                if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name)):
                    continue
                if node.targets[0].id == "revision":
                    revisions.add(ast.literal_eval(node.value))
                elif node.targets[0].id == "down_revision":  # None, a revision, or several for a merge
                    earlier = ast.literal_eval(node.value)
                    revised.update(earlier if isinstance(earlier, tuple | list) else [earlier])
    except (OSError, SyntaxError, ValueError):
        return None
    heads = revisions - revised
    return heads.pop() if len(heads) == 1 else None


def _runs_it_holds(path: Path) -> str:
    """'holds runs', 'may hold runs ...' when it cannot be read (a truncated store may still be recoverable),
    or '' when it can be read and holds none: only then may it be set aside and replaced."""
    try:
        with _read_only(path) as db:
            if "runs" not in _table_names(db):  # nothing was ever logged
                return ""
            return "holds runs" if db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] > 0 else ""
    except sqlite3.DatabaseError:
        return "may hold runs (SQLite cannot read it)"


def _build(path: Path) -> None:
    """Run MLflow's migrations on a private file, then link it into place unless another process was faster."""
    from mlflow import MlflowClient

    # Unique per build: MLflow caches a store per URI, and a reused name would find a deleted file's cache.
    building = path.with_name(f"{BUILDING_PREFIX}{os.getpid()}-{time.monotonic_ns()}")
    try:
        MlflowClient(tracking_uri=f"sqlite:///{building}").search_experiments(max_results=1)
        try:
            os.link(building, path)  # atomic, and fails if a concurrent stage put a store there first
        except FileExistsError:
            pass
    finally:
        for leftover in path.parent.glob(f"{building.name}*"):
            leftover.unlink(missing_ok=True)


def _remove_dead_builds(directory: Path) -> None:
    """Delete stores under construction whose process is gone (killed during the build)."""
    for leftover in directory.glob(f"{BUILDING_PREFIX}*"):
        pid = leftover.name.removeprefix(BUILDING_PREFIX).split("-")[0]  # also its SQLite journal
        if pid.isdigit() and not _pid_alive(int(pid)):
            leftover.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
