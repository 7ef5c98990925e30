"""Links into MLflow's UI. The experiments are tagged as model-training ones (`pipeline_runs`), but MLflow
3.17's UI still opens on its GenAI pages unless its "Model training" switch is on; `ui_link` gives the address
that turns it on (`make ui` prints one per task: `ui_links`, `ui_lines`).
"""

from __future__ import annotations

import os
from pathlib import Path

from lmtransfer.harness.pipeline_runs import experiment_name
from lmtransfer.harness.tracking_store import STORE_NAME, project_root, tracking_uri

UI_WORKFLOW = "workflowType=machine_learning"  # the UI's "Model training" switch; the UI remembers it


def ui_link(base: str = "http://127.0.0.1:5000", root: Path | None = None, task: str | None = None) -> str:
    """The UI address that opens a task's experiment (default: the one of the current folder's params.yaml) on its
    runs table; the experiment list while it has none (the store is never created here)."""
    from mlflow import MlflowClient

    store = (root or project_root()) / STORE_NAME
    if os.environ.get("MLFLOW_TRACKING_URI") or store.is_file():
        experiment = MlflowClient(tracking_uri=tracking_uri(root)).get_experiment_by_name(
            experiment_name(task))
        if experiment is not None:
            return f"{base}/#/experiments/{experiment.experiment_id}?{UI_WORKFLOW}"
    return f"{base}/#/experiments?{UI_WORKFLOW}"


def ui_links(base: str = "http://127.0.0.1:5000", root: Path | None = None) -> dict[str, str]:
    """`ui_link` of every task, by task: each task's runs live in their own experiment (`make ui` prints them)."""
    from lmtransfer.core.config import TASKS

    return {task: ui_link(base, root, task) for task in TASKS}


RUN_TARGETS = {"classification": "make run", "translation": "make run-translation"}


def ui_lines(base: str = "http://127.0.0.1:5000", root: Path | None = None) -> list[str]:
    """What `make ui` prints: each task's runs table, or that the task has no runs yet and what makes some."""
    lines = []
    for task, link in ui_links(base, root).items():
        if "/experiments/" in link:
            lines.append(f"open {link}  ({task})")
        else:
            lines.append(f"no {task} runs in this store yet: `{RUN_TARGETS.get(task, 'dvc repro')}` makes them "
                         f"(the UI still opens at {link})")
    return lines
