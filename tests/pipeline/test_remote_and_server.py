"""Beyond one machine: one tiny `dvc repro` logs to a real `mlflow server` on loopback (serving the artifacts itself),
and its DVC outputs round-trip through a DVC remote (a local path, then S3) into a fresh clone."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from loopback import free_port
from pipeline_repo import REPO, TINY_PARAMS, copy_repo, make_repo, merge, run, write_tiny_data

pytestmark = pytest.mark.slow

# The e2e test's tiny pipeline, one pretraining run of four steps: both fine-tunes still log a curve.
PARAMS = merge(json.loads(json.dumps(TINY_PARAMS)), {"pretrain": {"max_steps": 4, "eval_every": 2, "seeds": [0]},
                                                     "finetune": {"seeds": [0]}})
VARIANTS = ("pretrained", "scratch")
STAGES = {"prepare", "tokenize", "baseline", "pretrain@0", "evaluate", "plot", *(f"finetune_{v}@0-0" for v in VARIANTS)}
NO_POSTGRESQL = "PostgreSQL is not installed here (Debian: apt-get install postgresql): the server tests ran on SQLite"
SERVER_START_S = 120  # a cold start on a busy 2-core machine takes a few seconds


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (uvicorn is a child), SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
            return


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (initdb, pg_ctl): on the PATH, or where Debian puts them."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent  # a link's target: createdb and the others are beside it
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    return versions[-1].parent if versions else None


@contextlib.contextmanager
def postgresql_database():
    """A PostgreSQL server of its own (as user postgres when root) with a database `mlflow`: (its URI, stop)."""
    programs = postgres_bin()
    home = Path(tempfile.mkdtemp(prefix="lmtransfer-postgres-"))  # not under pytest's folder, which is root's alone
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(home, "postgres")
    data, port, env = home / "data", free_port(), {**os.environ, "LC_ALL": "C"}

    def pg(program: str, *args: str) -> None:
        run([*as_user, str(programs / program), *args], home, env)

    def stop() -> None:
        if (data / "postmaster.pid").exists():  # running (pg_ctl -w stop waits until the file is gone)
            pg("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")

    try:
        pg("initdb", "-D", str(data), "-U", "mlflow", "--auth=trust", "-E", "UTF8")
        pg("pg_ctl", "-D", str(data), "-o", f"-h 127.0.0.1 -p {port} -k {home}", "-l", str(home / "server.log"),
           "-w", "start")
        pg("createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "mlflow", "mlflow")
        yield f"postgresql+psycopg2://mlflow@127.0.0.1:{port}/mlflow", stop  # the driver make venv installs
    finally:
        try:
            stop()
        finally:
            shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def backend() -> tuple[str, object]:
    """PostgreSQL as a team's server has (`.ci/run` installs it), else SQLite: (a URI or "sqlite", a stop function)."""
    if postgres_bin() is None:
        yield "sqlite", None
        return
    with postgresql_database() as (uri, stop):
        yield uri, stop


@pytest.fixture(scope="module")
def server(backend, tmp_path_factory) -> tuple[str, Path]:
    """A running `mlflow server` on a free loopback port: yields its URI and its artifacts destination."""
    home = tmp_path_factory.mktemp("server")
    artifacts, port = home / "artifacts", free_port()
    store = f"sqlite:///{home / 'server.db'}" if backend[0] == "sqlite" else backend[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    # No GenAI job runner: with it, the server starts eight more Python processes that tracking does not use.
    env.update(MLFLOW_DISABLE_TELEMETRY="true", MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store,
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
    """The kill -9 recovery of harness.tracking works through the server's REST API too."""
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
    """MLflow's client would retry for minutes, then print a traceback; the stage says what to do."""
    root, env = pipeline
    result = subprocess.run([sys.executable, "stages/prepare.py"], cwd=root, capture_output=True, text=True,
                            env={**env, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}"}, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "prepare: error: MLFLOW_TRACKING_URI=http://127.0.0.1:" in result.stderr and "no tracking server" in (
        result.stderr)


def _contents(root: Path, outputs: list[str]) -> dict[str, bytes]:
    files = [f for out in outputs for f in (sorted((root / out).rglob("*")) if (root / out).is_dir() else [root / out])]
    return {str(file.relative_to(root)): file.read_bytes() for file in files if file.is_file()}


def _assert_pulled(origin: Path, clone: Path, env: dict[str, str]) -> dict[str, bytes]:
    """Every output of origin's dvc.lock is in the clone byte for byte, and it is up to date; returns them."""
    lock = YAML(typ="safe", pure=True).load((origin / "dvc.lock").read_text())
    outputs = sorted(out["path"] for stage in lock["stages"].values() for out in stage.get("outs", []))
    original, pulled = _contents(origin, outputs), _contents(clone, outputs)
    assert "models/pretrained/seed0.pt" in original and sorted(pulled) == sorted(original)
    assert [name for name in original if pulled[name] != original[name]] == []
    assert set(json.loads(run(["dvc", "status", "--json"], clone, env) or "{}")) <= {"validate"}
    return original


def _cached_outputs(root: Path, env: dict[str, str]) -> set[str]:
    """The cache objects of every output git does not hold (what `dvc push` sends; not the run-cache's extras)."""
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
    objects = {str(p.relative_to(remote / "files/md5")) for p in (remote / "files/md5").rglob("*") if p.is_file()}
    assert len(cached) > 20 and objects == cached  # every cached output, nothing else

    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(root), str(clone)], tmp_path, env)
    assert not (clone / "models/pretrained/seed0.pt").exists()  # git holds only the small, uncached files
    run(["dvc", "pull"], clone, env)
    original = _assert_pulled(root, clone, env)
    assert {"metrics/pretrain/seed0/samples.txt", "data/tokenized/spm.model"} <= set(original)


def remote_md_s3_lines() -> tuple[list[str], list[str]]:
    """The dvc and git lines of docs/guide/remote.md's S3 block: (here, after `# on another machine`)."""
    text = (REPO / "docs/guide/remote.md").read_text(encoding="utf-8")
    block = text.split("test_remote_and_server.py runs the dvc and git lines of the next block", 1)[1]
    block = block.split("```bash\n", 1)[1].split("```", 1)[0]
    here, there, side = [], [], "here"
    for line in block.splitlines():
        if line.startswith("# on another machine"):
            side = "there"
        command = line.split("  #", 1)[0].split(" #", 1)[0].strip() if not line.startswith("#") else ""
        if command.startswith(("dvc ", "git ")):
            (here if side == "here" else there).append(command)
    return here, there


def test_the_s3_commands_of_remote_md_round_trip_outputs_and_an_experiment_through_an_s3_server(pipeline, tmp_path):
    """docs/guide/remote.md's S3 lines against moto: keys only in .dvc/config.local; a clone pulls every byte."""
    import shlex

    import boto3
    from moto.server import ThreadedMotoServer

    root, _ = pipeline
    here, there = remote_md_s3_lines()
    assert any(line.startswith("dvc exp push") for line in here) and any(line == "dvc pull" for line in there)
    repo = tmp_path / "copy"  # the module's pipeline stays as it is for the other tests
    env = {k: v for k, v in copy_repo(root, repo).items() if not k.startswith("AWS_")}
    if "storage" in run(["dvc", "remote", "list"], repo, env):  # the local one another test added
        run(["dvc", "remote", "remove", "storage"], repo, env)
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))  # no key but those of .dvc/config.local
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="team-key", aws_secret_access_key="team-secret",
                     region_name="us-east-1").create_bucket(Bucket="lmtransfer-team")
        values = {"s3://my-bucket/": "s3://lmtransfer-team/", "https://minio.example.com:9000": endpoint,
                  "YOUR_KEY_ID": "team-key", "YOUR_SECRET_KEY": "team-secret", "my-experiment": "tiny-s3"}

        def commands(lines: list[str], folder: Path) -> None:
            for line in lines:
                if line.startswith("dvc exp push"):  # an experiment to push: the workspace as it is, saved
                    run(["dvc", "exp", "save", "-n", "tiny-s3"], folder, env)
                for placeholder, value in values.items():
                    line = line.replace(placeholder, value)
                for command in line.split(" && "):
                    run(shlex.split(command), folder, env)

        origin = tmp_path / "origin.git"
        run(["git", "init", "-q", "--bare", str(origin)], tmp_path, env)
        run(["git", "remote", "add", "origin", str(origin)], repo, env)
        run(["git", "add", "-A"], repo, env)
        run(["git", "commit", "-qm", "results", "--allow-empty"], repo, env)  # as the other tests left it
        run(["git", "push", "-q", "--set-upstream", "origin", "HEAD"], repo, env)
        commands(here, repo)
        assert "team-secret" not in (repo / ".dvc/config").read_text()
        assert "team-secret" in (repo / ".dvc/config.local").read_text()
        assert ".dvc/config.local" not in run(["git", "ls-files"], repo, env).split()
        assert json.loads(run(["dvc", "status", "--cloud", "--json"], repo, env) or "{}") == {}

        clone = tmp_path / "clone"
        run(["git", "clone", "-q", str(origin), str(clone)], tmp_path, env)
        env["PYTHONPATH"] = str(clone / "src")
        nothing = subprocess.run(["dvc", "pull"], cwd=clone, env=env, capture_output=True, text=True)
        assert nothing.returncode != 0  # no key yet: the bucket is not open to anyone
        commands(there, clone)
        _assert_pulled(repo, clone, env)
        assert "tiny-s3" in run(["dvc", "exp", "list", "--name-only"], clone, env).split()
    finally:
        server.stop()


def test_the_server_s_store_is_postgresql_and_holds_the_runs_the_models_and_the_registry(backend, server, pipeline,
                                                                                          tmp_path):
    """PostgreSQL holds the runs (read with SQL); the registry's champion, served, answers as `lmtransfer predict`."""
    if backend[0] == "sqlite":
        pytest.skip(NO_POSTGRESQL)
    import mlflow
    import psycopg2
    from mlflow import MlflowClient

    uri, _ = server
    root, env = pipeline
    with contextlib.closing(psycopg2.connect(backend[0].replace("+psycopg2", ""))) as db, db.cursor() as cursor:
        cursor.execute("SELECT r.name, r.status FROM runs r JOIN experiments e ON r.experiment_id = e.experiment_id "
                       "WHERE e.name = 'lmtransfer'")
        rows = cursor.fetchall()
        cursor.execute("SELECT count(*) FROM model_versions WHERE name = 'lmtransfer-classification'")
        (versions,) = cursor.fetchone()
    assert STAGES <= {name for name, _ in rows} and {status for _, status in rows} == {"FINISHED"}
    assert versions == 1
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    champion = client.get_model_version_by_alias("lmtransfer-classification", "champion")
    report = json.loads((root / "metrics/evaluate.json").read_text())
    assert float(champion.tags["gap"]) == pytest.approx(report["gap"]["accuracy_mean"], abs=1e-6)
    texts = ["a great and wonderful film", "an awful boring plot", "the story was a film"]
    try:
        mlflow.set_tracking_uri(uri)
        model = mlflow.pyfunc.load_model("models:/lmtransfer-classification@champion", dst_path=str(tmp_path))
        import pandas as pd

        served = model.predict(pd.DataFrame({"text": texts}))
    finally:
        mlflow.set_tracking_uri(None)
    predicted = run([sys.executable, "-m", "lmtransfer.cli", "predict",
                     "--checkpoint", f"models/finetuned/pretrained/seed{champion.tags['run']}.pt", *texts], root, env)
    lines = [line.split("\t") for line in predicted.strip().splitlines()]
    assert list(served["label"]) == [line[0] for line in lines]
    assert list(served["probability"]) == pytest.approx([float(line[1]) for line in lines], abs=5e-4)  # printed: 3


def test_a_stage_stops_in_one_line_when_the_server_s_database_is_down(backend, server, pipeline):
    """The server answers, its PostgreSQL is gone: one line, not minutes of retries; outputs stay. Last: it stops it."""
    if backend[0] == "sqlite":
        pytest.skip(NO_POSTGRESQL)
    root, env = pipeline
    before = {path: (root / path).read_bytes() for path in ("data/prepared/train.tsv", "dvc.lock")}
    backend[1]()
    result = subprocess.run([sys.executable, "stages/prepare.py"], cwd=root, capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.count("\n") == 1 and "prepare: error:" in result.stderr and server[0] in result.stderr
    assert {path: (root / path).read_bytes() for path in before} == before
