"""A stage's MLflow run and what it logs: one run per executed stage (`stage_run`), a child of the run of its
pipeline execution (`pipeline_runs`). The stages' code logs through the helpers here (`log_run`, `log_file`,
`log_checkpoint`, ...), which log nothing on the other ranks of a torchrun job.

Where the store is: `tracking_store`; runs left RUNNING by a dead process: `orphan_runs`; UI links: `mlflow_ui`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmtransfer.core.io import sha256_of
from lmtransfer.harness.orphan_runs import PROCESS_TAG, close_orphaned_runs, is_alive, process_tag, running_stage_runs
from lmtransfer.harness.pipeline_runs import (
    end_pipeline,
    experiment_id_for,
    experiment_name,
    flatten,
    git_commit,
    log_to_pipeline,  # also imported from here by the evaluate stages: DVC dependencies, not to be edited
    pipeline_id,
    pipeline_parent,
    resume_pipeline,
)
from lmtransfer.harness.run_tags import PARENT_TAG, TAG_PREFIX
from lmtransfer.harness.tracking_store import (
    project_root,
    quiet_mlflow_logs,
    usable_tracking_uri,  # also imported from here by classification.inputs: a DVC dependency, not to be edited
)

CHECKPOINT_TAG = f"{TAG_PREFIX}checkpoint_sha256"
PREVIOUS_ATTEMPT_TAG = f"{TAG_PREFIX}previous_attempt"  # a killed earlier run of the same stage


def is_main_process() -> bool:
    """Rank 0 of a torchrun job (torchrun sets RANK), or a process on its own: the one that logs to MLflow."""
    return int(os.environ.get("RANK", "0")) == 0


@contextmanager
def stage_run(
    stage: str, params: dict[str, dict[str, Any]], upstream_run_id: str | None = None, run_name: str | None = None,
    clear_snapshots: Callable[[set[str]], list[str]] | None = None,
) -> Iterator[Any]:
    """Open the MLflow run of one stage execution (named `run_name`, default the stage); yields the active run.
    `params` are what the run records. `clear_snapshots` (the stage that reads every trained model) is given the
    names of the stages still running and removes the other stages' resume snapshots, returning their names.

    Use mlflow's fluent API (mlflow.log_metrics, ...) inside the block. Under torchrun only rank 0 opens the run:
    the other ranks get None (they train, and log nothing: `log_metrics`).
    """
    import mlflow
    from mlflow import MlflowClient

    if not is_main_process():
        yield None
        return
    quiet_mlflow_logs()
    root = project_root()
    # Read before set_tracking_uri(), which itself exports MLFLOW_TRACKING_URI into this process.
    user_store = bool(os.environ.get("MLFLOW_TRACKING_URI"))
    mlflow.set_tracking_uri(usable_tracking_uri(root))
    client = MlflowClient()
    experiment_id = experiment_id_for(client, experiment_name(), root, user_store)
    group = pipeline_id()
    common_tags = {
        f"{TAG_PREFIX}pipeline_id": group,
        "git_commit": git_commit(),
        **({"dvc_exp_name": os.environ["DVC_EXP_NAME"]} if os.environ.get("DVC_EXP_NAME") else {}),
        **({"dvc_exp_baseline": os.environ["DVC_EXP_BASELINE_REV"]} if os.environ.get("DVC_EXP_BASELINE_REV") else {}),
    }
    parent_id = pipeline_parent(client, experiment_id, group, common_tags, root)
    tags = _stage_tags(client, experiment_id, stage, run_name or stage, common_tags, parent_id, upstream_run_id)
    if clear_snapshots is not None:
        _clear_snapshots_of_finished_stages(client, experiment_id, clear_snapshots)
    resume_pipeline(client, parent_id)  # after close_orphaned_runs: a killed earlier attempt may have ended it
    status, run_id = "FAILED", None
    try:
        with mlflow.start_run(experiment_id=experiment_id, run_name=run_name or stage, tags=tags) as run:
            run_id = run.info.run_id
            mlflow.log_params(flatten(params))
            yield run
        status = "FINISHED"
    except KeyboardInterrupt:  # Ctrl-C: stopped, not broken
        status = "KILLED"
        if run_id:
            _while_stopping(lambda: client.set_terminated(run_id, status=status))
        raise
    except Exception as error:
        stop = _stop_behind(error)  # MLflow failed to close the run while the stage was being stopped
        if stop is None:
            raise
        status = "KILLED"
        _report_unmarked(error)
        raise stop from None
    finally:
        # The pipeline run spans its stages: it ends when the latest one ends, with that one's outcome.
        if status == "KILLED":
            _while_stopping(lambda: end_pipeline(client, experiment_id, parent_id, status, run_id))
        else:
            end_pipeline(client, experiment_id, parent_id, status, run_id)


def _stage_tags(client, experiment_id: str, stage: str, run_name: str, common_tags: dict[str, str], parent_id: str,
                upstream_run_id: str | None) -> dict[str, str]:
    """A stage run's tags: nested under the pipeline run (the tag nests it; start_run(parent_run_id=...) would
    also check that the parent is active), its process, and the earlier attempts it follows (closed here)."""
    tags = {**common_tags, f"{TAG_PREFIX}kind": "stage", "stage": stage, PARENT_TAG: parent_id,
            PROCESS_TAG: process_tag()}
    if upstream_run_id:
        tags["upstream_run_id"] = upstream_run_id
    orphans = close_orphaned_runs(client, experiment_id, run_name)
    if orphans:
        tags[PREVIOUS_ATTEMPT_TAG] = ",".join(orphans)
    return tags


def _clear_snapshots_of_finished_stages(client, experiment_id: str, clear: Callable[[set[str]], list[str]]) -> None:
    """The resume snapshots of every stage whose run is no longer alive, removed by `clear`."""
    alive = {run.info.run_name for run in running_stage_runs(client, experiment_id)
             if is_alive(run.data.tags.get(PROCESS_TAG, ""))}
    for finished in clear(alive):
        print(f"resume: the snapshot of {finished} removed: that stage has completed")


def _stop_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The stop (Ctrl-C, SIGTERM) during whose handling `error` was raised, if any."""
    seen = error.__context__
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__context__
    return None


def _while_stopping(mark: Callable[[], None]) -> None:
    """Store bookkeeping on the way out of a stopped stage: a stop that landed inside a store write can leave the
    store locked by this very process, and the stop must still end in one line, not a traceback."""
    try:
        mark()
    except Exception as error:  # noqa: BLE001 - sqlite/sqlalchemy errors: the next stage closes the runs
        _report_unmarked(error)


def _report_unmarked(error: BaseException) -> None:
    first = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
    print(f"tracking: the stopped stage's run could not be marked KILLED ({first[:160]}); the next stage marks it",
          file=sys.stderr, flush=True)


def active_run_id() -> str | None:
    """The MLflow run this process logs into, if any: a training handed over to a new process continues it."""
    if "mlflow" not in sys.modules:
        return None
    import mlflow

    run = mlflow.active_run()
    return run.info.run_id if run else None


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    """mlflow.log_metrics in the stage's run; the other ranks of a torchrun job have no run and log nothing."""
    if is_main_process():
        import mlflow

        mlflow.log_metrics(metrics, step=step)


def log_run(tags: dict[str, Any] | None = None, params: dict[str, Any] | None = None,
            metrics: dict[str, Any] | None = None, step: int | None = None) -> None:
    """Tags, params and the numeric metrics (non-numbers left out) on the stage's run; nothing on the other ranks
    of a torchrun job. The one door the stages' code goes through to MLflow, with `log_file` and `log_checkpoint`."""
    if not is_main_process():
        return
    import mlflow

    if tags:
        mlflow.set_tags(tags)
    if params:
        mlflow.log_params(params)
    numbers = {k: float(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float))}
    if numbers:
        mlflow.log_metrics(numbers, step=step)


def log_file(content: dict | str | Path, name: str) -> None:
    """A dict (as JSON), a text or a file (by its path) attached to the stage's run under `name`."""
    if not is_main_process():
        return
    import mlflow

    if isinstance(content, dict):
        mlflow.log_dict(content, name)
    elif isinstance(content, Path):
        mlflow.log_artifact(str(content), name or None)
    else:
        mlflow.log_text(content, name)


def log_checkpoint(path: str | Path) -> None:
    """The checkpoint a stage wrote: its sha256 as a tag (lineage), and the file as the run's artifact."""
    if not is_main_process():
        return
    import mlflow

    tag_checkpoint(path)
    mlflow.log_artifact(str(path))


def tag_checkpoint(path: str | Path) -> None:
    """Tag the active run with the sha256 of the checkpoint it wrote: lineage that keeps checkpoints byte-identical."""
    import mlflow

    mlflow.set_tag(CHECKPOINT_TAG, sha256_of(path))


def run_that_wrote(path: str | Path) -> str:
    """The id of the latest run tagged with this checkpoint's sha256 ('' when the store has none)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=usable_tracking_uri())  # not mlflow.set_tracking_uri: it exports the variable
    experiment = client.get_experiment_by_name(experiment_name())
    if experiment is None:
        return ""
    found = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{CHECKPOINT_TAG}` = '{sha256_of(path)}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return found[0].info.run_id if found else ""


def runs_that_wrote(paths: Iterable[str | Path]) -> str:
    """The MLflow runs that wrote `paths`, comma-separated (those known): a stage's upstream runs."""
    return ",".join(filter(None, (run_that_wrote(path) for path in paths)))


def plot_stage_run(params: Any, draw: Callable[[], list[Path]]) -> None:
    """The plot stage's MLflow run: `draw()` makes the figures inside it, they become artifacts, and the headline
    goes on the pipeline run too: the last stage puts the answer there, since evaluate is skipped when the
    fine-tuned models come out identical (a fresh clone's run)."""
    import mlflow

    from lmtransfer.core.io import read_json, require_file
    from lmtransfer.core.paths import HEADLINE

    with stage_run("plot", params.sections("plot")):
        figures = draw()
        for figure in figures:
            mlflow.log_artifact(str(figure), "figures")
        log_to_pipeline(read_json(require_file(HEADLINE, "headline metrics")))
    print("plot: " + ", ".join(str(f) for f in figures))


def log_tokenization(meta: dict) -> None:
    """What a tokenize stage made of the data: tokens and unknown-piece rate per split, and the vocabulary size."""
    import mlflow

    mlflow.log_metrics({f"tokens_{k}": v for k, v in meta["tokens"].items()})
    mlflow.log_metrics({f"unknown_rate_{k}": v for k, v in meta["unknown_rate"].items()})
    mlflow.log_metric("vocab_size", meta["vocab_size"])
