"""A second run of the tiny pipeline from scratch, killed twice on the way, gives the session's first run's results
byte for byte, and opens no network connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_repo import (
    TINY_PARAMS,
    kill_repro_when,
    make_repo,
    merge,
    results_of,
    run,
    tiny_pipeline,
    write_tiny_data,
)

pytestmark = pytest.mark.slow


def test_a_second_run_from_scratch_killed_twice_gives_byte_identical_results_and_opens_no_network_connection(
        tmp_path_factory, tmp_path):
    """Same commit, params and data, a fresh copy, killed with -9 at random moments (in a pretraining run, then in a
    fine-tune) and finished by `dvc repro`: every result file and every output hash is the first run's, no MLflow run
    is left RUNNING and no resume snapshot is left behind. Every Python process of those runs (dvc and each stage)
    records any DNS lookup or socket connection: with the data on disk (here: files) there is none: no MLflow
    telemetry, no hub, no update check."""
    first = results_of(tiny_pipeline(tmp_path_factory))
    resumable = merge(json.loads(json.dumps(TINY_PARAMS)), {"train": {"resume_every": 1}})  # not a DVC param
    root = tmp_path / "repo"
    root.mkdir()
    env = with_network_recorder(make_repo(root, resumable, write_tiny_data), tmp_path)
    kill_repro_when(root, env, ".resume/pretrain*/*.pt")
    kill_repro_when(root, env, ".resume/finetune_*/*.pt")
    run(["dvc", "repro"], root, env)
    assert Path(env["NETWORK_LOG"]).read_text() == ""
    second = results_of(root)
    assert sorted(second) == sorted(first)
    different = [name for name in first if first[name] != second[name]]
    assert different == []
    assert b"seconds" not in second["metrics/pretrain/seed0.json"]
    assert b"tokens_per_s" not in second["metrics/pretrain/seed0/train.tsv"]
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    statuses = {r.info.status for r in client.search_runs([experiment.experiment_id])}
    assert statuses <= {"FINISHED", "KILLED"} and "FINISHED" in statuses
    assert not list((root / ".resume").rglob("*.pt"))


NETWORK_RECORDER = """
import os, socket
_log = os.environ["NETWORK_LOG"]

def _record(what):
    with open(_log, "a") as handle:
        handle.write(f"{os.getpid()} {what}\\n")

_connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

def connect(self, address):
    if self.family != socket.AF_UNIX:
        _record(f"connect {address!r}")
    return _connect(self, address)

def connect_ex(self, address):
    if self.family != socket.AF_UNIX:
        _record(f"connect_ex {address!r}")
    return _connect_ex(self, address)

def getaddrinfo(host, *args, **kwargs):
    _record(f"getaddrinfo {host!r}")
    return _getaddrinfo(host, *args, **kwargs)

socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
"""


def with_network_recorder(env: dict[str, str], folder: Path) -> dict[str, str]:
    """`env` with a sitecustomize that logs every DNS lookup and non-local socket connection of each Python process
    to folder/network.log (checked to work first)."""
    recorder = folder / "recorder"
    recorder.mkdir()
    (recorder / "sitecustomize.py").write_text(NETWORK_RECORDER)
    log = folder / "network.log"
    log.write_text("")
    env = {**env, "PYTHONPATH": f"{recorder}{os.pathsep}{env['PYTHONPATH']}", "NETWORK_LOG": str(log)}
    probe = subprocess.run([sys.executable, "-c", "import socket; socket.getaddrinfo('localhost', 80)"], env=env)
    assert probe.returncode == 0 and "getaddrinfo 'localhost'" in log.read_text()  # the recorder works
    log.write_text("")
    return env
