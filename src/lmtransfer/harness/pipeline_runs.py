"""The pipeline run: a parent run that groups the stage runs of one pipeline execution.

Grouping: every stage run is a child of one "pipeline" parent run, identified
by LMTRANSFER_PIPELINE_ID if set, else the DVC experiment name, else the `dvc`
process that launched the stage (all stages of one `dvc repro` share it). The
parent carries every parameter of params.yaml, lasts from its first stage's start
to its last stage's end, and receives the headline (`log_to_pipeline`), so the
experiment's run table compares pipeline executions at a glance.

The parent's status follows its stages: each stage that starts under it makes it
RUNNING again and owns it (PROCESS_TAG); each stage that ends gives it its end
time and outcome (FINISHED, FAILED, KILLED), unless another of its stages still
runs. After the last stage it is FINISHED, its duration the whole pipeline's.

Each task's runs live in an experiment of their own (`experiment_name`), tagged as a model-training
experiment (`mlflow.experimentKind`; the UI's links to it: `mlflow_ui`).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from lmtransfer.core import knobs
from lmtransfer.harness.launcher import launching_dvc
from lmtransfer.harness.orphan_runs import PROCESS_TAG, is_alive, process_tag, running_stage_runs
from lmtransfer.harness.run_tags import PARENT_TAG, TAG_PREFIX
from lmtransfer.harness.tracking_store import artifact_location

EXPERIMENT_ENV = knobs.EXPERIMENT
PIPELINE_ENV = knobs.PIPELINE_ID
DEFAULT_EXPERIMENT = "lmtransfer"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # the UI's "model training" kind: opens on the runs table


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _dvc_ancestor() -> str | None:
    """The launching `dvc` process as 'pid-start_time', so one `dvc repro` = one group."""
    launcher = launching_dvc()
    try:
        return f"{launcher.pid}-{int(launcher.create_time())}" if launcher else None
    except Exception:  # noqa: BLE001 - psutil.Error: it ended meanwhile
        return None


def pipeline_id() -> str:
    chosen = knobs.read(PIPELINE_ENV)
    if chosen:
        return chosen
    if os.environ.get("DVC_EXP_NAME"):
        return f"exp-{os.environ['DVC_EXP_NAME']}"
    ancestor = _dvc_ancestor()
    if ancestor:
        return f"repro-{ancestor}"
    return f"standalone-{uuid.uuid4().hex[:12]}"


def experiment_name(task: str | None = None) -> str:
    """LMTRANSFER_EXPERIMENT, else `lmtransfer` for classification and `lmtransfer-<task>` for another task (by
    default the `task` key of the params.yaml in the stage's folder): each task's runs are compared among themselves."""
    chosen = knobs.read(EXPERIMENT_ENV)
    if chosen:
        return chosen
    task = task or _task_of(Path("params.yaml"))
    return DEFAULT_EXPERIMENT if task == "classification" else f"{DEFAULT_EXPERIMENT}-{task}"


def _task_of(params_file: Path) -> str:
    from ruamel.yaml import YAML

    try:
        raw = YAML(typ="safe", pure=True).load(params_file.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError):
        return "classification"
    return str(raw.get("task", "classification")) if isinstance(raw, dict) else "classification"


def experiment_id_for(client, name: str, root: Path, user_store: bool) -> str:
    """Find or create the experiment; in the project's own store its artifacts go to `mlartifacts/`."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        location = None if user_store else artifact_location(root)
        return client.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
    if EXPERIMENT_KIND_TAG not in experiment.tags:  # a store made by an older version: tag it once
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return experiment.experiment_id


def _all_params(root: Path) -> dict[str, Any]:
    """Every key of params.yaml (flattened; top-level ones like `task` as they are), for the pipeline run: one
    row per execution in the run table."""
    from ruamel.yaml import YAML

    path = Path("params.yaml") if Path("params.yaml").is_file() else root / "params.yaml"
    try:
        raw = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8")) or {}
    except (OSError, ValueError):
        return {}
    return flatten(raw) if isinstance(raw, dict) else {}


def pipeline_parent(client, experiment_id: str, group: str, common_tags: dict[str, str], root: Path) -> str:
    """Find or create the parent run that groups this pipeline execution's stages."""
    from mlflow.entities import Param

    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{TAG_PREFIX}pipeline_id` = '{group}' and tags.`{TAG_PREFIX}kind` = 'pipeline'",
        max_results=1,
    )
    if found:
        return found[0].info.run_id
    name = os.environ.get("DVC_EXP_NAME") or time.strftime("pipeline-%Y%m%d-%H%M%S")
    # Owned by the stage that runs under it (see resume_pipeline, close_orphaned_runs): first the creating one.
    run = client.create_run(experiment_id, run_name=name,
                            tags={**common_tags, f"{TAG_PREFIX}kind": "pipeline", PROCESS_TAG: process_tag()})
    params = [Param(key, str(value)) for key, value in _all_params(root).items()]
    for begin in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
        client.log_batch(run.info.run_id, params=params[begin : begin + 100])
    return run.info.run_id


def _set_pipeline_status(client, parent_id: str, status: str) -> None:
    """The pipeline run's status, with now as its end time: MLflow cannot clear an end time, so while RUNNING
    it says when the latest stage started, and once ended, when the latest stage ended."""
    client.set_terminated(parent_id, status=status, end_time=int(time.time() * 1000))


def resume_pipeline(client, parent_id: str) -> None:
    """A stage starting under the pipeline run: it owns the run (an earlier stage may have ended it) and makes it
    RUNNING until it ends; the owner tag first, so close_orphaned_runs elsewhere never sees it ownerless."""
    client.set_tag(parent_id, PROCESS_TAG, process_tag())
    _set_pipeline_status(client, parent_id, "RUNNING")


def end_pipeline(client, experiment_id: str, parent_id: str, status: str, own_run_id: str | None) -> None:
    """A stage ending: the pipeline run ends with it (its end time, its outcome), unless another of its stages still
    runs (stages run side by side under one LMTRANSFER_PIPELINE_ID): that one then owns it, and ends it."""
    others = [run for run in running_stage_runs(client, experiment_id, parent_id)
              if run.info.run_id != own_run_id and is_alive(run.data.tags.get(PROCESS_TAG, ""))]
    if others:
        client.set_tag(parent_id, PROCESS_TAG, others[0].data.tags[PROCESS_TAG])
    else:
        _set_pipeline_status(client, parent_id, status)


def log_to_pipeline(metrics: dict[str, float]) -> None:
    """Put headline numbers on the pipeline run that groups the active stage run (call inside stage_run)."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    parent_id = mlflow.active_run().data.tags[PARENT_TAG]  # stage_run created the run with this tag
    now = int(time.time() * 1000)
    MlflowClient().log_batch(parent_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'model': {'d_model': 200}, 'task': 'x'} -> {'model.d_model': 200, 'task': 'x'}: the keys of params.yaml,
    as `dvc exp run -S` and MLflow's params name them."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
