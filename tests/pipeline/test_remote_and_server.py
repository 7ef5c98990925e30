"""Beyond one machine: a tiny pipeline logs to a real `mlflow server` on loopback, and its DVC outputs
round-trip through a DVC remote (a local path) into a fresh clone.

One `dvc repro` serves every test here; the server has its own SQLite backend and serves the
artifacts itself (`--serve-artifacts`), as a shared server for several machines would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from pipeline_repo import REPO, TINY_PARAMS, make_repo, merge, run, write_tiny_data

pytestmark = pytest.mark.slow

# The e2e test's tiny pipeline, one pretraining run of four steps: both fine-tunes still log a curve.
PARAMS = merge(json.loads(json.dumps(TINY_PARAMS)), {"pretrain": {"max_steps": 4, "eval_every": 2, "seeds": [0]},
                                                     "finetune": {"seeds": [0]}})
VARIANTS = ("pretrained", "scratch")
STAGES = {"prepare", "tokenize", "baseline", "pretrain@0", "evaluate", "plot", *(f"finetune_{v}@0-0" for v in VARIANTS)}
SERVER_START_S = 120  # a cold start on a busy 2-core machine takes a few seconds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (mlflow starts uvicorn as a child), SIGKILL if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> tuple[str, Path]:
    """A running `mlflow server` on a free loopback port: yields its URI and its artifacts destination."""
    home = tmp_path_factory.mktemp("server")
    artifacts, port = home / "artifacts", _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    # No GenAI job runner: with it, the server starts eight more Python processes that tracking does not use.
    env.update(MLFLOW_DISABLE_TELEMETRY="true", MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{home / 'server.db'}",
               "--serve-artifacts", "--artifacts-destination", str(artifacts),
               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    uri = f"http://127.0.0.1:{port}"
    with open(home / "server.log", "wb") as log:
        process = subprocess.Popen(command, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            deadline = time.monotonic() + SERVER_START_S
            while not _answers(f"{uri}/health"):
                assert process.poll() is None, (home / "server.log").read_text()[-3000:]
                assert time.monotonic() < deadline, f"mlflow server: no /health within {SERVER_START_S} s"
                time.sleep(0.25)
            yield uri, artifacts
        finally:
            _stop(process)


@pytest.fixture(scope="module")
def pipeline(server, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The tiny pipeline, run once by `dvc repro` with MLFLOW_TRACKING_URI pointing at the server."""
    root = tmp_path_factory.mktemp("repo")
    env = {**make_repo(root, PARAMS, write_tiny_data), "MLFLOW_TRACKING_URI": server[0]}
    run(["dvc", "repro"], root, env)
    return root, env


def test_runs_metrics_and_artifacts_arrive_on_the_tracking_server(server, pipeline, tmp_path):
    import mlflow
    from mlflow import MlflowClient

    uri, artifacts = server
    root, _ = pipeline
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("lmtransfer")
    assert experiment.artifact_location == f"mlflow-artifacts:/{experiment.experiment_id}"  # the server's store
    runs = client.search_runs([experiment.experiment_id])
    stages = {r.info.run_name: r for r in runs if r.data.tags.get("lmtransfer.kind") == "stage"}
    (parent,) = [r for r in runs if r.data.tags.get("lmtransfer.kind") == "pipeline"]
    assert set(stages) == STAGES and len(runs) == len(STAGES) + 1
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags["mlflow.parentRunId"] for r in stages.values()} == {parent.info.run_id}
    # lineage: found through checkpoint hashes, searched on the server
    assert stages["finetune_pretrained@0-0"].data.tags["upstream_run_id"] == stages["pretrain@0"].info.run_id
    assert set(stages["evaluate"].data.tags["upstream_run_id"].split(",")) == {
        stages[f"finetune_{v}@0-0"].info.run_id for v in VARIANTS}
    assert parent.data.metrics == pytest.approx(json.loads((root / "metrics/headline.json").read_text()))
    assert parent.data.params["finetune.seeds"] == "[0]"
    for variant in VARIANTS:  # the overlaid curves of the UI: same key, step = epoch
        history = client.get_metric_history(stages[f"finetune_{variant}@0-0"].info.run_id, "val_accuracy")
        assert sorted(m.step for m in history) == [1, 2]
    assert len(client.get_metric_history(stages["pretrain@0"].info.run_id, "train_loss")) >= 2
    logged = {("pretrain@0", "seed0.pt"): "models/pretrained/seed0.pt",
              ("pretrain@0", "samples.txt"): "metrics/pretrain/seed0/samples.txt",
              ("plot", "figures/finetune_accuracy.png"): "plots/finetune_accuracy.png"}
    for (stage, artifact), output in logged.items():
        run_id = stages[stage].info.run_id
        assert stages[stage].info.artifact_uri == f"mlflow-artifacts:/{experiment.experiment_id}/{run_id}/artifacts"
        downloaded = Path(client.download_artifacts(run_id, artifact, str(tmp_path)))  # through the server
        stored = artifacts / experiment.experiment_id / run_id / "artifacts" / artifact  # where the server keeps it
        assert downloaded.read_bytes() == stored.read_bytes() == (root / output).read_bytes(), artifact
    for variant in VARIANTS:  # each fine-tune's checkpoint travels inside its MLflow model, through the server too
        run = stages[f"finetune_{variant}@0-0"]
        location = client.get_logged_model(run.data.tags["lmtransfer.model_id"]).artifact_location
        model = Path(mlflow.artifacts.download_artifacts(location, dst_path=str(tmp_path / variant), tracking_uri=uri))
        carried = next(model.rglob("seed0-0.pt"))
        assert carried.read_bytes() == (root / f"models/finetuned/{variant}/seed0-0.pt").read_bytes()
        assert (model / "MLmodel").is_file() and any(artifacts.rglob("models/*/artifacts/artifacts/seed0-0.pt"))
    # nothing went to the repository's own store
    assert [name for name in ("mlflow.db", "mlartifacts", "mlruns") if (root / name).exists()] == []
    assert not list(root.glob(".mlflow.db.*"))


def test_a_killed_stage_run_on_the_server_is_marked_killed_when_the_stage_runs_again(server, pipeline, monkeypatch):
    """The kill -9 recovery of orphan_runs.close_orphaned_runs works through the server's REST API too."""
    import mlflow
    from mlflow import MlflowClient

    from lmtransfer.harness.tracking import PREVIOUS_ATTEMPT_TAG, stage_run

    uri, _ = server
    root, env = pipeline
    own = {"MLFLOW_TRACKING_URI": uri, "LMTRANSFER_EXPERIMENT": "kill-check", "DVC_ROOT": str(root)}
    code = ("import os, signal\nfrom lmtransfer.harness.tracking import stage_run\n"
            "with stage_run('prepare', {}):\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    killed = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                            env={**env, **own, "LMTRANSFER_PIPELINE_ID": "killed"})
    assert killed.returncode == -9, killed.stderr
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("kill-check")
    (orphan,) = client.search_runs([experiment.experiment_id], filter_string="attributes.run_name = 'prepare'")
    assert orphan.info.status == "RUNNING"
    for key, value in {**own, "LMTRANSFER_PIPELINE_ID": "the-next-repro"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(root)
    try:
        with stage_run("prepare", {}) as again:
            new_id = again.info.run_id
    finally:
        mlflow.set_tracking_uri(None)
    assert client.get_run(orphan.info.run_id).info.status == "KILLED"
    assert client.get_run(orphan.data.tags["mlflow.parentRunId"]).info.status == "KILLED"
    assert client.get_run(new_id).data.tags[PREVIOUS_ATTEMPT_TAG] == orphan.info.run_id


def test_a_stage_stops_in_one_line_when_the_tracking_server_is_down(pipeline):
    """MLflow's client would retry for minutes, then print a traceback; the stage says what to do instead."""
    root, env = pipeline
    result = subprocess.run([sys.executable, "stages/prepare.py"], cwd=root, capture_output=True, text=True,
                            env={**env, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{_free_port()}"}, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "prepare: error: MLFLOW_TRACKING_URI=http://127.0.0.1:" in result.stderr and "no tracking server" in (
        result.stderr)


def _dvc_outputs(root: Path) -> list[str]:
    """Every output path dvc.lock records (cached or not)."""
    lock = YAML(typ="safe", pure=True).load((root / "dvc.lock").read_text())
    return sorted(out["path"] for stage in lock["stages"].values() for out in stage.get("outs", []))


def _contents(root: Path, outputs: list[str]) -> dict[str, bytes]:
    files = {}
    for output in outputs:
        path = root / output
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file():
                files[str(file.relative_to(root))] = file.read_bytes()
    return files


def _objects(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _cached_outputs(root: Path, env: dict[str, str]) -> set[str]:
    """The cache objects of every output git does not hold: each file's, each directory's listing and its files.

    (The local cache holds more: DVC also copies the git-tracked metrics of the training stages there, for
    its run-cache; `dvc push` leaves those out.)"""
    tracked = set(run(["git", "ls-files"], root, env).splitlines())
    lock = YAML(typ="safe", pure=True).load((root / "dvc.lock").read_text())
    hashes = set()
    for out in (out for stage in lock["stages"].values() for out in stage.get("outs", [])):
        if out["path"] not in tracked:
            hashes.add(out["md5"])
            if out["md5"].endswith(".dir"):
                listing = root / ".dvc/cache/files/md5" / out["md5"][:2] / out["md5"][2:]
                hashes.update(entry["md5"] for entry in json.loads(listing.read_text()))
    return {f"{md5[:2]}/{md5[2:]}" for md5 in hashes}


def test_every_cached_output_round_trips_through_a_dvc_remote_into_a_fresh_clone(pipeline, tmp_path):
    root, env = pipeline
    remote = tmp_path / "remote"
    run(["dvc", "remote", "add", "-d", "storage", str(remote)], root, env)
    shutil.copy(REPO / ".gitignore", root / ".gitignore")  # as in the project: no __pycache__ or timings/ in git
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-qm", "results, and the DVC remote"], root, env)
    run(["dvc", "push"], root, env)
    assert json.loads(run(["dvc", "status", "--cloud", "--json"], root, env) or "{}") == {}
    cached = _cached_outputs(root, env)
    assert len(cached) > 20 and _objects(remote / "files/md5") == cached  # every cached output, nothing else

    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(root), str(clone)], tmp_path, env)
    outputs = _dvc_outputs(root)
    assert not (clone / "models/pretrained/seed0.pt").exists()  # git holds only the small, uncached files
    run(["dvc", "pull"], clone, env)
    original, pulled = _contents(root, outputs), _contents(clone, outputs)
    assert {"models/pretrained/seed0.pt", "metrics/pretrain/seed0/samples.txt", "data/tokenized/spm.model"} <= set(
        original)
    assert sorted(pulled) == sorted(original)
    assert [name for name in original if pulled[name] != original[name]] == []
    status = json.loads(run(["dvc", "status", "--json"], clone, env) or "{}")
    assert set(status) <= {"validate"}  # validate is always_changed by design; every other stage is up to date
