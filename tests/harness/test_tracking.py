"""MLflow tracking helpers that need no pipeline run."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch import nn

from lmtransfer.core.paths import PretrainOutputs
from lmtransfer.harness.tracking import (
    PREVIOUS_ATTEMPT_TAG,
    PROCESS_TAG,
    UI_WORKFLOW,
    _alive,
    process_tag,
    show_answer,
    stage_run,
    ui_lines,
)
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.modeling.model import ModelConfig
from lmtransfer.training.finetune_start import language_model_start
from lmtransfer.training.resume import clear_finished_snapshots
from lmtransfer.training.stage_args import parse_finetune_args

from shipped import shipped_params


@pytest.mark.slow
def test_make_ui_opens_each_tasks_experiment_on_its_runs_table(tmp_path, monkeypatch):
    """`make ui` prints one link per task: classification and translation runs live in separate experiments."""
    _own_store(monkeypatch, tmp_path, "ui")
    assert all("runs in this store yet" in line for line in ui_lines("http://h:1"))
    assert not (tmp_path / "mlflow.db").exists()  # asking for the links never creates a store
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    classification = client.create_experiment("lmtransfer")
    assert ui_lines("http://h:1") == [
        f"open http://h:1/#/experiments/{classification}/runs?{UI_WORKFLOW}  (classification)",
        f"no translation runs in this store yet: `make run-translation` makes them (the UI still opens at "
        f"http://h:1/#/experiments?{UI_WORKFLOW})"]


@pytest.fixture(autouse=True)
def unset_tracking_uri():
    """A stage run points MLflow at its store for the whole process: put that back after each test."""
    yield
    if "mlflow" in sys.modules:
        sys.modules["mlflow"].set_tracking_uri(None)


def _own_store(monkeypatch, root, pipeline_id: str) -> None:
    """Stages log to the project's own store under `root`, as one pipeline execution."""
    monkeypatch.setenv("DVC_ROOT", str(root))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")  # the project's own store, under DVC_ROOT
    monkeypatch.setenv("LMTRANSFER_PIPELINE_ID", pipeline_id)
    monkeypatch.delenv("LMTRANSFER_EXPERIMENT", raising=False)


@pytest.fixture
def store(tmp_path, monkeypatch, empty_store):
    """A client of the project's own (empty) store under tmp_path; stages run from tmp_path (no params.yaml)."""
    from mlflow import MlflowClient

    _own_store(monkeypatch, tmp_path, "one-repro")
    monkeypatch.chdir(tmp_path)
    return MlflowClient(tracking_uri=f"sqlite:///{empty_store(tmp_path)}")


def _pipeline_of(client, run):
    return client.get_run(run.data.tags["mlflow.parentRunId"])


def test_the_pipeline_run_lasts_until_its_last_stage_ends(store):
    """Each stage makes it RUNNING again; the last one to end gives it its end time: it spans the pipeline."""
    with stage_run("prepare", {}) as first:
        assert _pipeline_of(store, first).info.status == "RUNNING"
    assert _pipeline_of(store, first).info.status == "FINISHED"  # between stages
    with stage_run("pretrain", {}) as second:
        during = _pipeline_of(store, second)
    first, second = store.get_run(first.info.run_id), store.get_run(second.info.run_id)
    after = _pipeline_of(store, second)
    assert during.info.run_id == after.info.run_id == _pipeline_of(store, first).info.run_id
    assert (during.info.status, after.info.status) == ("RUNNING", "FINISHED")
    assert after.info.start_time <= first.info.start_time
    assert after.info.end_time >= second.info.end_time >= second.info.start_time >= first.info.end_time


def test_the_answer_is_the_experiments_description_and_a_saved_view_that_make_ui_opens(store):
    """After evaluate, the runs page shows the answer without a click: the experiment's and the pipeline run's
    description, and the saved view (headline metrics as columns) that `make ui`'s link opens."""
    import json

    with stage_run("evaluate", {}) as run:
        show_answer("pretrained 0.75, scratch 0.74", ["more"], ["pretrained", "scratch", "gap"])
    experiment = store.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.note.content"].split("\n")[0] == "pretrained 0.75, scratch 0.74"
    assert _pipeline_of(store, run).data.tags["mlflow.note.content"] == experiment.tags["mlflow.note.content"]
    view = json.loads(experiment.tags["mlflow.sharedViewState.answer"])
    assert json.loads(view["state"])["selectedColumns"] == ["metrics.`pretrained`", "metrics.`scratch`",
                                                             "metrics.`gap`"]
    assert (f"/#/experiments/{experiment.experiment_id}/runs?viewStateShareKey=answer&{UI_WORKFLOW}"
            in ui_lines("http://h:1")[0])


def test_the_pipeline_run_ends_as_its_last_stage_did(store):
    """A stage that fails leaves the pipeline run FAILED; one stopped with Ctrl-C, KILLED (its own run too)."""
    with pytest.raises(ValueError):
        with stage_run("prepare", {}) as failed:
            raise ValueError("broken")
    assert _pipeline_of(store, failed).info.status == "FAILED"
    with pytest.raises(KeyboardInterrupt):
        with stage_run("tokenize", {}) as stopped:
            raise KeyboardInterrupt
    assert store.get_run(stopped.info.run_id).info.status == _pipeline_of(store, stopped).info.status == "KILLED"
    with stage_run("tokenize", {}) as again:  # the same pipeline, run on: it ends as its latest stage did
        pass
    assert _pipeline_of(store, again).info.status == "FINISHED"


@pytest.mark.slow
def test_the_pipeline_run_stays_running_while_another_of_its_stages_runs(store):
    """Stages side by side under one LMTRANSFER_PIPELINE_ID: the first to end hands the pipeline run on."""
    with stage_run("prepare", {}) as first:
        parent = _pipeline_of(store, first)
        sibling = store.create_run(first.info.experiment_id, run_name="baseline", tags={
            "mlflow.parentRunId": parent.info.run_id, "lmtransfer.kind": "stage", PROCESS_TAG: process_tag()})
    assert store.get_run(parent.info.run_id).info.status == "RUNNING"
    store.set_terminated(sibling.info.run_id)


@pytest.mark.slow
def test_a_fine_tune_of_the_pretrained_model_logs_the_shape_of_its_checkpoint(store, tmp_path, monkeypatch):
    """Its params leave `model.*` out: the run logs the checkpoint's shape, not params.yaml's, like its scratch twin."""
    config = ModelConfig(vocab_size=12, d_model=8, n_layers=3, n_heads=2, d_ff=16, dropout=0.0, causal=False)
    save_checkpoint(PretrainOutputs(0).checkpoint, nn.Linear(1, 1), "language_model", config)
    args = parse_finetune_args(["--init", "pretrained", "--pretrain-seed", "0", "--seed", "0"])
    start = language_model_start(shipped_params(), {"vocab_size": 12, "pad_id": 0}, args)
    with stage_run("finetune_pretrained", start.logged_params(shipped_params()), run_name=start.stage) as tuned:
        pass
    params = store.get_run(tuned.info.run_id).data.params
    assert {key: params[key] for key in params if key.startswith("model.")} == {
        "model.n_layers": "3", "model.d_model": "8", "model.n_heads": "2", "model.d_ff": "16",
        "model.dropout": "0.0", "model.embedding_init": "normal", "model.attention": "bidirectional"}
    assert params["finetune.lr"] == str(shipped_params().finetune.lr)
    with stage_run("finetune_scratch", {"model": {"n_layers": 4}}, run_name="finetune_scratch@0") as scratch:
        pass
    assert store.get_run(scratch.info.run_id).data.params == {"model.n_layers": "4"}  # declared: as they are


@pytest.mark.slow
def test_the_pipeline_run_carries_every_key_of_params_yaml(store, tmp_path):
    (tmp_path / "params.yaml").write_text("task: translation\nmodel:\n  d_model: 16\n", encoding="utf-8")
    with stage_run("prepare", {}) as run:
        pass
    assert _pipeline_of(store, run).data.params == {"task": "translation", "model.d_model": "16"}


def _store_after_a_killed_process(tmp_path, monkeypatch, code: str):
    """Run `code` in a child that must die of SIGKILL; then stages run as the next repro. Returns client, experiment."""
    from mlflow import MlflowClient

    _own_store(monkeypatch, tmp_path, "killed-repro")
    code = f"import os, signal\nfrom lmtransfer.harness.tracking import stage_run\n{code}"
    killed = subprocess.run([sys.executable, "-c", code], env={**os.environ}, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    monkeypatch.setenv("LMTRANSFER_PIPELINE_ID", "the-next-repro")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    return client, client.get_experiment_by_name("lmtransfer")


def test_a_clock_step_between_two_stages_changes_no_process_identity(monkeypatch):
    """The stages of one `dvc repro` are grouped by the dvc process's start: an NTP step mid-run once split them."""
    import psutil

    tag = process_tag()
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: 86_400.0)  # create_time() now a day after 1970
    assert process_tag() == tag and _alive(tag)
    assert not _alive(tag.rsplit(":", 1)[0] + ":1")  # the same pid started at another time is another process


@pytest.mark.slow
def test_a_killed_stage_run_is_marked_killed_when_the_stage_runs_again(tmp_path, monkeypatch):
    """kill -9 leaves its run RUNNING; the next run of the stage closes it and links to it."""
    client, experiment = _store_after_a_killed_process(
        tmp_path, monkeypatch, "with stage_run('pretrain', {'pretrain': {'lr': 0.1}}):\n    os.kill(os.getpid(), 9)\n")
    (orphan,) = client.search_runs([experiment.experiment_id], filter_string="attributes.run_name = 'pretrain'")
    assert orphan.info.status == "RUNNING"
    killed_pipeline = orphan.data.tags["mlflow.parentRunId"]
    assert client.get_run(killed_pipeline).info.status == "RUNNING"
    alive = client.create_run(experiment.experiment_id, run_name="pretrain",  # its process (this one) lives: kept
                              tags={PROCESS_TAG: process_tag(), "lmtransfer.kind": "stage"})
    with stage_run("pretrain", {"pretrain": {"lr": 0.1}}) as run:
        new_id = run.info.run_id
    assert client.get_run(orphan.info.run_id).info.status == "KILLED"
    assert client.get_run(killed_pipeline).info.status == "KILLED"
    assert client.get_run(alive.info.run_id).info.status == "RUNNING"
    assert client.get_run(new_id).data.tags[PREVIOUS_ATTEMPT_TAG] == orphan.info.run_id
    assert client.get_run(new_id).info.status == "FINISHED"


@pytest.mark.slow
def test_a_pipeline_run_left_running_by_a_kill_after_its_stage_closed_is_marked_killed(tmp_path, monkeypatch):
    """Killed between a stage closing its own run and closing the pipeline run: the next stage closes it."""
    client, experiment = _store_after_a_killed_process(  # dies closing the pipeline run, after the stage's
        tmp_path, monkeypatch, "from mlflow import MlflowClient\nclose = MlflowClient.set_terminated\n"
        "def die_on_pipeline(self, run_id, status=None, **k):\n"
        "    if self.get_run(run_id).data.tags.get('lmtransfer.kind') == 'pipeline' and status != 'RUNNING':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return close(self, run_id, status, **k)\n"
        "MlflowClient.set_terminated = die_on_pipeline\n"
        "with stage_run('prepare', {}):\n    pass\n",
    )
    (pipeline,) = client.search_runs([experiment.experiment_id], filter_string="tags.`lmtransfer.kind` = 'pipeline'")
    (stage,) = client.search_runs([experiment.experiment_id], filter_string="tags.`lmtransfer.kind` = 'stage'")
    assert (pipeline.info.status, stage.info.status) == ("RUNNING", "FINISHED")
    with stage_run("tokenize", {}):
        pass
    assert client.get_run(pipeline.info.run_id).info.status == "KILLED"
    assert client.search_runs([experiment.experiment_id], filter_string="attributes.status = 'RUNNING'") == []


@pytest.mark.slow
def test_a_killed_stage_that_dvc_restores_is_closed_by_the_next_stage_and_evaluate_clears_its_snapshot(
        tmp_path, monkeypatch):
    """kill -9 of a fine-tune, then a run-cache restore: the next stage marks its run KILLED; evaluate clears it."""
    client, experiment = _store_after_a_killed_process(
        tmp_path, monkeypatch, "with stage_run('finetune_scratch', {}, run_name='finetune_scratch@0'):\n"
                               "    os.kill(os.getpid(), signal.SIGKILL)\n")
    monkeypatch.chdir(tmp_path)  # stages run from the pipeline's root, where .resume/ lies
    for stage in ("finetune_scratch_seed0", "finetune_scratch_seed1"):
        (tmp_path / ".resume" / stage).mkdir(parents=True)
        (tmp_path / ".resume" / stage / "task.pt").write_bytes(b"snapshot")
    client.create_run(experiment.experiment_id, run_name="finetune_scratch@1",  # alive: running beside
                      tags={PROCESS_TAG: process_tag(), "lmtransfer.kind": "stage"})
    with stage_run("baseline", {}):
        pass
    (orphan,) = client.search_runs([experiment.experiment_id], "attributes.run_name = 'finetune_scratch@0'")
    assert orphan.info.status == "KILLED" and (tmp_path / ".resume/finetune_scratch_seed0").is_dir()
    with stage_run("evaluate", {}, clear_snapshots=clear_finished_snapshots):  # DVC runs it after every training
        pass
    assert sorted(p.name for p in (tmp_path / ".resume").iterdir()) == ["finetune_scratch_seed1"]


CI_VARIABLES = ("PYTEST_CURRENT_TEST", "GITHUB_ACTIONS", "CI", "CIRCLECI", "GITLAB_CI", "JENKINS_URL", "TRAVIS",
                "TF_BUILD", "BITBUCKET_BUILD_NUMBER", "CODEBUILD_BUILD_ARN", "BUILDKITE", "TEAMCITY_VERSION",
                "CLOUD_RUN_EXECUTION", "RUNBOT_HOST_URL", "RUNBOT_BUILD_NAME", "RUNBOT_WORKER_ID")


def _python(code: str, **env: str):
    clean = {k: v for k, v in os.environ.items() if k not in CI_VARIABLES and not k.startswith(("MLFLOW_", "DO_NOT"))}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True)


@pytest.mark.slow
def test_mlflow_telemetry_is_off_once_lmtransfer_is_imported():
    """As a stage imports them: lmtransfer first, then mlflow. Outside CI (where MLflow would report)."""
    result = _python(
        "import lmtransfer, mlflow\n"
        "from mlflow.telemetry.client import get_telemetry_client\n"
        "from mlflow.telemetry.utils import _IS_IN_CI_ENV_OR_TESTING\n"
        "assert not _IS_IN_CI_ENV_OR_TESTING, 'the check needs an environment where MLflow would report'\n"
        "print(get_telemetry_client() is None)\n"
    )
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr


def test_a_user_can_turn_mlflow_telemetry_back_on():
    result = _python("import os, lmtransfer; print(os.environ['MLFLOW_DISABLE_TELEMETRY'])",
                     MLFLOW_DISABLE_TELEMETRY="false")
    assert result.stdout.strip() == "false", result.stderr


def test_every_stage_imports_lmtransfer_before_mlflow_and_torch():
    """lmtransfer pins the kernels and turns telemetry off: every stage imports `_checkout` (which loads it) first."""
    for script in sorted(Path(__file__).resolve().parents[2].joinpath("stages").glob("*.py")):
        imports = [n for n in ast.parse(script.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
        if script.name == "_checkout.py":
            assert [n.names[0].name for n in imports if isinstance(n, ast.Import)] == ["sys", "lmtransfer"]
        else:
            first = imports[0]
            assert isinstance(first, ast.Import) and first.names[0].name == "_checkout", (
                f"{script.name} imports {ast.unparse(first)} before _checkout")
