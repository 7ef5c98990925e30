"""A second tiny run from scratch, killed twice, gives the first run's results byte for byte, with no network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline_repo import TINY_PARAMS, kill_repro_when, make_repo, results_of, run, tiny_pipeline, write_tiny_data

pytestmark = pytest.mark.slow


def test_a_second_run_from_scratch_killed_twice_gives_byte_identical_results_and_opens_no_network_connection(
        tmp_path_factory, tmp_path):
    """kill -9 in a pretraining run, then a fine-tune, `dvc repro`: the first run's results, no DNS or connection."""
    first = results_of(tiny_pipeline(tmp_path_factory))
    resumable = {**TINY_PARAMS, "train": {**TINY_PARAMS["train"], "resume_every": 1}}  # not a DVC param
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

def _recorded(name, original):
    def call(self, address):
        if self.family != socket.AF_UNIX:
            _record(f"{name} {address!r}")
        return original(self, address)
    return call

def getaddrinfo(host, *args, _getaddrinfo=socket.getaddrinfo, **kwargs):
    _record(f"getaddrinfo {host!r}")
    return _getaddrinfo(host, *args, **kwargs)

socket.socket.connect = _recorded("connect", socket.socket.connect)
socket.socket.connect_ex = _recorded("connect_ex", socket.socket.connect_ex)
socket.getaddrinfo = getaddrinfo
"""


def with_network_recorder(env: dict[str, str], folder: Path) -> dict[str, str]:
    """`env` with a sitecustomize logging each DNS lookup and non-local connection to folder/network.log (checked)."""
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
