"""The tracking store is checked before any work: any problem is one line naming it and the fix, the store kept."""

import http.server
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lmtransfer.core.errors import TrackingStoreError
from lmtransfer.core.io import sha256_of
from lmtransfer.harness.tracking import check_store

from loopback import free_port


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A project folder whose own store (mlflow.db, mlartifacts/) the checks look at."""
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def _store_with_runs(root: Path, runs: int = 30) -> Path:
    from mlflow import MlflowClient

    check_store()
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.create_experiment("lmtransfer", artifact_location=(root / "mlartifacts").as_uri())
    for _ in range(runs):
        client.create_run(experiment)
    return root / "mlflow.db"


def _refused() -> str:
    with pytest.raises(TrackingStoreError) as error:
        check_store()
    assert "\n" not in str(error.value) and str(error.value).endswith("nothing was run")
    return str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize("damage", [
    lambda data, half: data[:half] + random.Random(0).randbytes(32768) + data[half + 32768:],
    lambda data, half: data[:half],
    lambda data, half: b"not a database " * 400,
], ids=["random bytes", "cut to half", "not sqlite"])
def test_a_damaged_store_is_named_in_one_line_and_never_written(project, damage):
    store = _store_with_runs(project)
    data = store.read_bytes()
    store.write_bytes(damage(data, len(data) // 2))
    digest = sha256_of(store)
    message = _refused()
    assert message.startswith(f"{store} is damaged (SQLite: ") and ".recover" in message and "move it away" in message
    assert sha256_of(store) == digest and sorted(p.name for p in project.iterdir()) == ["mlartifacts", "mlflow.db"]


def test_a_directory_named_like_the_store_is_named_as_one(project):
    (project / "mlflow.db" / "inside").mkdir(parents=True)
    assert "is a directory, not an MLflow store (a file): move it away" in _refused()
    assert (project / "mlflow.db" / "inside").is_dir()


@pytest.mark.slow
def test_a_store_that_cannot_be_written_stops_before_any_work_and_is_left_unchanged(project):
    store = _store_with_runs(project, runs=1)
    if subprocess.run(["chattr", "+i", str(store)], capture_output=True).returncode:
        pytest.skip("chattr +i (an immutable file) is not available here")
    try:
        digest = sha256_of(store)
        assert "cannot be written (attempt to write a readonly database)" in _refused() and sha256_of(store) == digest
    finally:
        subprocess.run(["chattr", "-i", str(store)], check=True)


@pytest.mark.slow
def test_a_half_migrated_store_is_named_with_the_upgrade_that_finishes_it(project):
    store = _store_with_runs(project, runs=1)
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE _alembic_tmp_params (key TEXT)")
    assert ("is half-migrated (an interrupted schema migration): back it up and run "
            f"`mlflow db upgrade sqlite:///{store}`") in _refused()


def test_a_store_whose_writer_was_killed_mid_write_is_recovered_not_called_damaged(project):
    """kill -9 during a write leaves a hot journal; the check's read-write open lets SQLite roll it back."""
    store = project / "mlflow.db"
    code = (
        "import os, signal, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('PRAGMA cache_size=1')\n"  # spill to the file before the commit: the journal is hot
        "db.execute('CREATE TABLE kept (x TEXT)')\n"
        "db.execute(\"INSERT INTO kept VALUES ('kept')\")\n"
        "db.execute('BEGIN')\n"
        "for _ in range(2000):\n    db.execute('INSERT INTO kept VALUES (?)', ('y' * 500,))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    subprocess.run([sys.executable, "-c", code, str(store)], check=False)
    assert (project / "mlflow.db-journal").exists() and check_store() == f"sqlite:///{store}"
    assert sqlite3.connect(store).execute("SELECT x FROM kept").fetchall() == [("kept",)]


@pytest.mark.slow
def test_a_kill_while_the_store_is_built_leaves_no_store_and_the_next_stage_builds_it(project):
    """kill -9 at a random moment of the build (import included), then the store is complete and usable."""
    store = project / "mlflow.db"
    code = "from lmtransfer.harness.tracking import check_store\ncheck_store()\n"
    building = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(project.glob(".mlflow.db.building-*")) and building.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the build has started: its private file exists
    time.sleep(random.uniform(0.0, 0.8))
    if building.poll() is None:
        os.kill(building.pid, signal.SIGKILL)
    building.wait()
    assert not store.exists() or sqlite3.connect(store).execute("SELECT COUNT(*) FROM experiments").fetchone()
    _store_with_runs(project, runs=1)
    assert sorted(p.name for p in project.iterdir()) == ["mlartifacts", "mlflow.db"]  # the dead build's files gone


@pytest.mark.slow
def test_a_copied_store_sends_new_artifacts_to_this_checkout_and_says_so(project, capsys):
    """MLflow keeps an experiment's artifact folder as an absolute path: a copied project wrote into the original's."""
    store = _store_with_runs(project, runs=1)
    original = (project.parent / "original" / "mlartifacts").as_uri()
    with sqlite3.connect(store) as db:
        db.execute("UPDATE experiments SET artifact_location = ? WHERE name = 'lmtransfer'", (original,))
    capsys.readouterr()
    check_store()
    note = capsys.readouterr().out
    assert note.count("\n") == 1 and f"kept its artifacts in {original}" in note and "copied" in note
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT artifact_location FROM experiments WHERE name = 'lmtransfer'").fetchone() == (
            (project / "mlartifacts").as_uri(),)
    check_store()  # settled: nothing more to say
    assert capsys.readouterr().out == ""


def test_an_artifact_folder_that_cannot_be_written_stops_before_any_work(project):
    (project / "mlartifacts").write_text("a file where the folder goes")  # chmod would not stop root
    assert _refused().startswith(f"{project / 'mlartifacts'} cannot be written (")


def test_a_tracking_server_that_does_not_answer_is_one_line_naming_the_variable(monkeypatch):
    uri = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    line = _refused()
    assert line.startswith(f"MLFLOW_TRACKING_URI={uri}: no tracking server answers (") and (
        "unset MLFLOW_TRACKING_URI to log to the local mlflow.db") in line


@pytest.mark.parametrize(("status", "body", "stops"), [
    (500, b'{"error_code": "INTERNAL_ERROR", "message": "(psycopg2.OperationalError) connection refused"}', True),
    (503, b"", True),
    (404, b'{"error_code": "RESOURCE_DOES_NOT_EXIST"}', False),  # the store answered: no such experiment
    (200, b'{"experiment": {}}', False),
])
def test_a_server_that_answers_but_cannot_read_its_store_is_one_line_before_any_work(status, body, stops,
                                                                                      monkeypatch):
    """A server whose database is down fails every store read with HTTP 5xx: asked once, without MLflow's retries."""
    asked = []

    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        log_message = lambda self, *args: None  # noqa: E731 - quiet

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{httpd.server_address[1]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    try:
        if stops:
            line = _refused()
            assert line.startswith(f"MLFLOW_TRACKING_URI={uri}: the tracking server answers but cannot read its store "
                                   f"(HTTP {status}") and ("psycopg2.OperationalError" in line or not body)
        else:
            assert check_store() == uri
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(asked) == 1 and asked[0].startswith("/api/2.0/mlflow/experiments/get-by-name")
