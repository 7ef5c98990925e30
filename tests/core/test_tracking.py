"""MLflow tracking helpers that need no pipeline run."""

from __future__ import annotations

from lmtransfer.harness.tracking import UI_WORKFLOW, ui_link


def test_the_ui_link_opens_the_experiment_on_its_runs_table(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("LMTRANSFER_EXPERIMENT", raising=False)
    assert ui_link("http://h:1", tmp_path) == f"http://h:1/#/experiments?{UI_WORKFLOW}"
    assert not (tmp_path / "mlflow.db").exists()  # asking for the link never creates a store

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client.create_experiment("other")
    experiment_id = client.create_experiment("lmtransfer")
    assert ui_link("http://h:1", tmp_path) == f"http://h:1/#/experiments/{experiment_id}?workflowType=machine_learning"


def _store_after_a_killed_process(tmp_path, monkeypatch, pipeline_id: str, code: str):
    """Run `code` in a child process that must die of SIGKILL, with the project's store under tmp_path;
    return a client of that store and its experiment."""
    import os
    import subprocess
    import sys

    from mlflow import MlflowClient

    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")  # the project's own store, under DVC_ROOT
    monkeypatch.setenv("LMTRANSFER_PIPELINE_ID", pipeline_id)
    monkeypatch.delenv("LMTRANSFER_EXPERIMENT", raising=False)
    killed = subprocess.run([sys.executable, "-c", code], env={**os.environ}, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    return client, client.get_experiment_by_name("lmtransfer")


def test_a_killed_stage_run_is_marked_killed_when_the_stage_runs_again(tmp_path, monkeypatch):
    """kill -9 leaves its run RUNNING; the next run of the stage closes it and links to it."""

    import mlflow

    from lmtransfer.harness.tracking import (
        PREVIOUS_ATTEMPT_TAG,
        PROCESS_TAG,
        _process_tag,
        stage_run,
    )

    client, experiment = _store_after_a_killed_process(
        tmp_path, monkeypatch, "kill-test",
        "import os, signal\nfrom lmtransfer.harness.tracking import stage_run\n"
        "with stage_run('pretrain', {'pretrain': {'lr': 0.1}}):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    )
    (orphan,) = client.search_runs([experiment.experiment_id], filter_string="attributes.run_name = 'pretrain'")
    assert orphan.info.status == "RUNNING"
    killed_pipeline = orphan.data.tags["mlflow.parentRunId"]
    assert client.get_run(killed_pipeline).info.status == "RUNNING"
    # a run whose process is alive (this one) is left alone
    alive = client.create_run(experiment.experiment_id, run_name="pretrain",
                              tags={PROCESS_TAG: _process_tag(), "lmtransfer.kind": "stage"})
    monkeypatch.setenv("LMTRANSFER_PIPELINE_ID", "the-next-repro")
    try:
        with stage_run("pretrain", {"pretrain": {"lr": 0.1}}) as run:
            new_id = run.info.run_id
    finally:
        mlflow.set_tracking_uri(None)
    assert client.get_run(orphan.info.run_id).info.status == "KILLED"
    assert client.get_run(killed_pipeline).info.status == "KILLED"
    assert client.get_run(alive.info.run_id).info.status == "RUNNING"
    assert client.get_run(new_id).data.tags[PREVIOUS_ATTEMPT_TAG] == orphan.info.run_id
    assert client.get_run(new_id).info.status == "FINISHED"


def test_a_pipeline_run_left_running_by_a_kill_after_its_stage_closed_is_marked_killed(tmp_path, monkeypatch):
    """Killed between a stage closing its own run and closing the pipeline run: the next stage closes it."""

    import mlflow

    from lmtransfer.harness.tracking import stage_run

    client, experiment = _store_after_a_killed_process(  # dies closing the pipeline run, after the stage's
        tmp_path, monkeypatch, "killed-between",
        "import os, signal\nfrom mlflow import MlflowClient\n"
        "from lmtransfer.harness.tracking import stage_run\n"
        "close = MlflowClient.set_terminated\n"
        "def die_on_pipeline(self, run_id, *a, **k):\n"
        "    if self.get_run(run_id).data.tags.get('lmtransfer.kind') == 'pipeline':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return close(self, run_id, *a, **k)\n"
        "MlflowClient.set_terminated = die_on_pipeline\n"
        "with stage_run('prepare', {}):\n    pass\n",
    )
    (pipeline,) = client.search_runs([experiment.experiment_id], filter_string="tags.`lmtransfer.kind` = 'pipeline'")
    (stage,) = client.search_runs([experiment.experiment_id], filter_string="tags.`lmtransfer.kind` = 'stage'")
    assert (pipeline.info.status, stage.info.status) == ("RUNNING", "FINISHED")
    monkeypatch.setenv("LMTRANSFER_PIPELINE_ID", "the-next-repro")
    try:
        with stage_run("tokenize", {}):
            pass
    finally:
        mlflow.set_tracking_uri(None)
    assert client.get_run(pipeline.info.run_id).info.status == "KILLED"
    running = client.search_runs([experiment.experiment_id], filter_string="attributes.status = 'RUNNING'")
    assert running == []


CI_VARIABLES = ("PYTEST_CURRENT_TEST", "GITHUB_ACTIONS", "CI", "CIRCLECI", "GITLAB_CI", "JENKINS_URL", "TRAVIS",
                "TF_BUILD", "BITBUCKET_BUILD_NUMBER", "CODEBUILD_BUILD_ARN", "BUILDKITE", "TEAMCITY_VERSION",
                "CLOUD_RUN_EXECUTION", "RUNBOT_HOST_URL", "RUNBOT_BUILD_NAME", "RUNBOT_WORKER_ID")


def _python(code: str, **env: str):
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if k not in CI_VARIABLES and not k.startswith(("MLFLOW_", "DO_NOT"))}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True)


def test_mlflow_telemetry_is_off_once_lmtransfer_is_imported():
    """As a stage imports them: lmtransfer first, then mlflow. Outside CI (where MLflow would report)."""
    result = _python(
        "import lmtransfer, mlflow\n"
        "from mlflow.telemetry.client import get_telemetry_client\n"
        "from mlflow.telemetry.utils import _IS_IN_CI_ENV_OR_TESTING\n"
        "assert not _IS_IN_CI_ENV_OR_TESTING, 'the check needs an environment where MLflow would report'\n"
        "print(get_telemetry_client() is None)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_a_user_can_turn_mlflow_telemetry_back_on():
    result = _python("import os, lmtransfer; print(os.environ['MLFLOW_DISABLE_TELEMETRY'])",
                     MLFLOW_DISABLE_TELEMETRY="false")
    assert result.stdout.strip() == "false", result.stderr


def test_every_stage_imports_lmtransfer_before_mlflow_and_torch():
    """The kernels are pinned and telemetry turned off when lmtransfer loads: it must load first."""
    import ast
    from pathlib import Path

    for script in sorted(Path(__file__).resolve().parents[2].joinpath("stages").glob("*.py")):
        if script.name == "_checkout.py":  # the import path set-up that precedes lmtransfer; it imports sys alone
            continue
        imports = [node for node in ast.parse(script.read_text()).body if isinstance(node, (ast.Import, ast.ImportFrom))]
        names = [(n.names[0].name if isinstance(n, ast.Import) else n.module).split(".")[0] for n in imports]
        ours = names.index("lmtransfer")
        later = [name for name in names[:ours] if name in ("mlflow", "torch", "numpy", "pandas", "sklearn")]
        assert not later, f"{script.name} imports {later} before lmtransfer"
