"""The local MLflow store survives a kill while it is being built, and a broken one is named, not traced."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from lmtransfer.core.errors import TrackingStoreError
from lmtransfer.core.io import sha256_of
from lmtransfer.harness.tracking_store import BUILDING_PREFIX, check_server, ensure_store, store_problem


def _half_migrated(path):
    """A complete store plus the temporary table an interrupted migration leaves behind."""
    ensure_store(path)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE _alembic_tmp_experiments (experiment_id INTEGER)")


@pytest.mark.slow
def test_a_half_migrated_empty_store_is_set_aside_and_rebuilt(tmp_path, capsys):
    store = tmp_path / "mlflow.db"
    _half_migrated(store)
    assert store_problem(store).startswith("half-migrated")
    digest = sha256_of(store)
    ensure_store(store)
    assert store_problem(store) is None
    (aside,) = tmp_path.glob("mlflow.db.broken-*")
    assert sha256_of(aside) == digest  # kept as it was, not deleted
    assert "held no run; set aside as mlflow.db.broken-" in capsys.readouterr().out


@pytest.mark.slow
def test_a_half_migrated_store_holding_runs_is_named_in_one_line_and_left_alone(tmp_path):
    store = tmp_path / "mlflow.db"
    _store_with_runs(store, runs=1)
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE _alembic_tmp_params (key TEXT)")
    digest = sha256_of(store)
    with pytest.raises(TrackingStoreError) as error:
        ensure_store(store)
    assert str(error.value) == (
        f"{store} is half-migrated (an interrupted schema migration left temporary tables); it holds runs, "
        f"so it is left as it is: back it up and run `mlflow db upgrade sqlite:///{store}`, "
        "or move it away to start a new store"
    )
    assert sha256_of(store) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


def test_a_file_that_is_not_sqlite_is_named(tmp_path):
    store = tmp_path / "mlflow.db"
    store.write_text("not a database " * 100)
    assert store_problem(store).startswith("not a readable SQLite database")


@pytest.mark.slow
def test_a_truncated_store_that_held_runs_is_left_alone_not_replaced(tmp_path):
    store = tmp_path / "mlflow.db"
    _store_with_runs(store)
    store.write_bytes(store.read_bytes()[: store.stat().st_size // 2])
    digest = sha256_of(store)
    with pytest.raises(TrackingStoreError, match="it may hold runs \\(SQLite cannot read it\\), so it is left as it is"):
        ensure_store(store)
    assert sha256_of(store) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


@pytest.mark.slow
def test_a_kill_while_the_store_is_built_leaves_no_store_and_the_next_stage_builds_it(tmp_path):
    """kill -9 at a random moment of the build (import included), then the store is usable and complete."""
    store = tmp_path / "mlflow.db"
    code = f"from pathlib import Path\nfrom lmtransfer.harness.tracking_store import ensure_store\nensure_store(Path({str(store)!r}))\n"
    building = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(f"{BUILDING_PREFIX}*")) and building.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the build has started: its private file exists
    time.sleep(random.uniform(0.0, 0.8))
    if building.poll() is None:
        os.kill(building.pid, signal.SIGKILL)
    building.wait()
    assert not store.exists() or store_problem(store) is None  # never a half-built store under the real name
    ensure_store(store)
    assert store_problem(store) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]  # the dead build's files are gone


def _store_with_runs(path, runs: int = 30):
    from mlflow import MlflowClient

    ensure_store(path)
    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    experiment = client.create_experiment("e")
    for _ in range(runs):
        client.create_run(experiment)


@pytest.mark.slow
def test_a_store_with_random_bytes_written_into_it_is_named_and_never_written(tmp_path):
    store = tmp_path / "mlflow.db"
    _store_with_runs(store)
    data = bytearray(store.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 32768] = random.Random(0).randbytes(32768)
    store.write_bytes(bytes(data))
    digest = sha256_of(store)
    with pytest.raises(TrackingStoreError) as error:
        ensure_store(store)
    message = str(error.value)
    assert message.startswith(f"{store} is ") and "so it is left as it is: move it away" in message
    assert "mlflow db upgrade" not in message and "\n" not in message
    assert sha256_of(store) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


@pytest.mark.slow
def test_a_store_whose_runs_table_is_gone_is_not_a_complete_store(tmp_path):
    store = tmp_path / "mlflow.db"
    ensure_store(store)
    with sqlite3.connect(store) as db:
        db.execute("PRAGMA foreign_keys = OFF")
        db.execute("DROP TABLE runs")
    assert store_problem(store) == "not a complete MLflow store (no runs table)"


def test_a_directory_named_like_the_store_is_named_as_one(tmp_path):
    store = tmp_path / "mlflow.db"
    (store / "inside").mkdir(parents=True)
    with pytest.raises(TrackingStoreError) as error:
        ensure_store(store)
    assert "is a directory, not an MLflow store (a file)" in str(error.value)
    assert "mlflow db upgrade" not in str(error.value) and ".recover" not in str(error.value)
    assert "move it away, and the next stage builds a new store there" in str(error.value)
    assert (store / "inside").is_dir()


@pytest.mark.slow
def test_a_store_that_cannot_be_written_stops_before_any_work_and_is_left_unchanged(tmp_path):
    store = tmp_path / "mlflow.db"
    _store_with_runs(store, runs=1)
    if subprocess.run(["chattr", "+i", str(store)], capture_output=True).returncode:
        pytest.skip("chattr +i (an immutable file) is not available here")
    try:
        digest = sha256_of(store)
        with pytest.raises(TrackingStoreError, match="cannot be written \\(attempt to write a readonly database\\)"):
            ensure_store(store)
        assert sha256_of(store) == digest
    finally:
        subprocess.run(["chattr", "-i", str(store)], check=True)


def test_a_store_whose_writer_was_killed_mid_write_is_recovered_not_called_unreadable(tmp_path):
    """kill -9 during a write leaves a hot journal; a read-only open cannot roll it back ('attempt to write a
    readonly database'), so the check lets SQLite recover first and then finds the rows committed before."""
    path = tmp_path / "store.db"
    code = (
        "import os, signal, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('PRAGMA cache_size=1')\n"  # spill to the file before the commit: the journal is hot
        "db.execute('CREATE TABLE runs (x TEXT)')\n"
        "db.execute(\"INSERT INTO runs VALUES ('kept')\")\n"
        "db.execute('BEGIN')\n"
        "for _ in range(2000):\n    db.execute('INSERT INTO runs VALUES (?)', ('y' * 500,))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    subprocess.run([sys.executable, "-c", code, str(path)], check=False)
    assert (tmp_path / "store.db-journal").exists()
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        sqlite3.connect(f"file:{path}?mode=ro", uri=True).execute("SELECT COUNT(*) FROM runs").fetchone()
    assert store_problem(path) == "not a complete MLflow store (no schema version)"  # read, not 'unreadable'
    assert sqlite3.connect(path).execute("SELECT x FROM runs").fetchall() == [("kept",)]


@pytest.mark.parametrize(("status", "body", "stops"), [
    (500, b'{"error_code": "INTERNAL_ERROR", "message": "(psycopg2.OperationalError) connection refused"}', True),
    (503, b"", True),
    (404, b'{"error_code": "RESOURCE_DOES_NOT_EXIST"}', False),  # the store answered: no such experiment
    (200, b'{"experiment": {}}', False),
])
def test_a_server_that_answers_but_cannot_read_its_store_is_one_line_before_any_work(status, body, stops):
    """A tracking server whose database is down answers /health but fails every store read with HTTP 5xx: the
    check asks once, without MLflow's minutes of retries, and names the server and what it said."""
    import http.server
    import threading

    asked = []

    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        if stops:
            with pytest.raises(TrackingStoreError) as stopped:
                check_server(uri)
            line = str(stopped.value)
            assert line.startswith(f"MLFLOW_TRACKING_URI={uri}: the tracking server answers but cannot read its store "
                                   f"(HTTP {status}") and "\n" not in line and "nothing was run" in line
            assert "psycopg2.OperationalError" in line if body else True
        else:
            check_server(uri)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(asked) == 1 and asked[0].startswith("/api/2.0/mlflow/experiments/get-by-name")


def test_the_schema_revision_a_store_must_be_at_is_alembic_s_head_read_without_importing_mlflow():
    """validate checks the store on every `dvc repro`; importing MLflow to ask alembic took 1.5 s of it."""
    code = ("import sys; from lmtransfer.harness.tracking_store import _latest_schema_revision; "
            "print(_latest_schema_revision(), 'mlflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    from mlflow.store.db.utils import _get_latest_schema_revision

    assert done.stdout.split() == [_get_latest_schema_revision(), "False"]


@pytest.mark.slow
def test_a_store_at_an_older_schema_is_named_with_both_revisions_and_the_upgrade(tmp_path):
    from mlflow.store.db.utils import _get_latest_schema_revision

    store = tmp_path / "mlflow.db"
    _store_with_runs(store, runs=1)
    with sqlite3.connect(store) as db:
        db.execute("UPDATE alembic_version SET version_num = 'f5a4f2784254'")  # a revision of MLflow's, not its last
    head = _get_latest_schema_revision()
    assert store_problem(store) == (f"at schema f5a4f2784254, not the {head} this MLflow needs (an interrupted or "
                                    "pending migration)")
    with pytest.raises(TrackingStoreError, match=f"run `mlflow db upgrade sqlite:///{store}`"):
        ensure_store(store)
