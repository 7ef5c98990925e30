"""MLflow tracking: one run per executed stage, grouped per pipeline execution.

The store lives at the repository root (SQLite `mlflow.db` + `mlartifacts/`).
DVC sets DVC_ROOT to the main repository even for `dvc exp run --temp` and
queued runs, so those land in the same store instead of a temp copy DVC
deletes. `MLFLOW_TRACKING_URI` overrides everything, e.g. a shared `mlflow server`
(docs/guide/scale.md, "Beyond one machine"): then no local store is made, and the server must answer.

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

The experiment is tagged as a model-training experiment (`mlflow.experimentKind`).
MLflow 3.17's UI still opens on its GenAI pages unless its "Model training" switch
is on; `ui_link` gives the address that turns it on (`make ui` prints one per task: `ui_links`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmtransfer.core import knobs
from lmtransfer.core.io import sha256_of
from lmtransfer.core.sharing import handed_over, is_main_process
from lmtransfer.harness.launcher import launching_dvc
from lmtransfer.harness.tracking_store import STORE_NAME, check_server, ensure_store

EXPERIMENT_ENV = knobs.EXPERIMENT
PIPELINE_ENV = knobs.PIPELINE_ID
DEFAULT_EXPERIMENT = "lmtransfer"
TAG_PREFIX = "lmtransfer."
CHECKPOINT_TAG = f"{TAG_PREFIX}checkpoint_sha256"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"  # the UI's "model training" kind: opens on the runs table
PARENT_TAG = "mlflow.parentRunId"
PROCESS_TAG = f"{TAG_PREFIX}process"  # host:pid:start, to recognise a run whose process died
PREVIOUS_ATTEMPT_TAG = f"{TAG_PREFIX}previous_attempt"  # a killed earlier run of the same stage


def project_root() -> Path:
    if os.environ.get("DVC_ROOT"):
        return Path(os.environ["DVC_ROOT"]).resolve()
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        return Path(top).resolve()
    except (OSError, subprocess.CalledProcessError):
        return Path.cwd().resolve()


def tracking_uri(root: Path | None = None) -> str:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(root or project_root()) / STORE_NAME}"


def usable_tracking_uri(root: Path | None = None) -> str:
    """`tracking_uri`, with the local store built or checked first, or a tracking server checked to answer."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        ensure_store((root or project_root()) / STORE_NAME)
    elif uri.startswith(("http://", "https://")):
        check_server(uri)
    return tracking_uri(root)


def artifact_location(root: Path | None = None) -> str:
    return ((root or project_root()) / "mlartifacts").as_uri()


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


def quiet_mlflow_logs() -> None:
    """MLflow's chatter off. Its SQLite layer also logs every database error with a traceback before it raises
    it again: the stage reports that exception in one line (a full disk) or with its traceback (a bug), so the
    logged copy is dropped, unless LMTRANSFER_DEBUG asks for everything."""
    for name in ("alembic", "mlflow.store.db.utils", "mlflow.tracking.fluent", "mlflow.store"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if not knobs.read_at_import(knobs.DEBUG):
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def _experiment_id(client, name: str, root: Path, user_store: bool) -> str:
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


def _pipeline_parent(client, experiment_id: str, group: str, common_tags: dict[str, str], root: Path) -> str:
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
    # Owned by the stage that runs under it (see _resume_pipeline, close_orphaned_runs): first the creating one.
    run = client.create_run(experiment_id, run_name=name,
                            tags={**common_tags, f"{TAG_PREFIX}kind": "pipeline", PROCESS_TAG: _process_tag()})
    params = [Param(key, str(value)) for key, value in _all_params(root).items()]
    for begin in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
        client.log_batch(run.info.run_id, params=params[begin : begin + 100])
    return run.info.run_id


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


def _process_tag() -> str:
    """'host:pid:start time' of this process: enough to tell later whether it is still alive."""
    import socket

    import psutil

    process = psutil.Process()
    return f"{socket.gethostname()}:{process.pid}:{int(process.create_time())}"


def _is_alive(tag: str) -> bool:
    """Whether the process a run was tagged with still runs (on another host: assumed alive)."""
    import socket

    import psutil

    try:
        host, pid, started = tag.rsplit(":", 2)
        if host != socket.gethostname():
            return True
        return int(psutil.Process(int(pid)).create_time()) == int(started)
    except (ValueError, psutil.Error):
        return False


def close_orphaned_runs(client, experiment_id: str, run_name: str) -> list[str]:
    """Stage runs still RUNNING although their process is gone (killed, power cut) are marked KILLED: this stage's,
    and every other stage's too, since a stage DVC restores from its run-cache runs no code to close its own.

    Called when any stage starts; returns the ids of this stage's, so the new run can link to them.
    """
    orphans = [run for run in _running_stage_runs(client, experiment_id)
               if not _is_alive(run.data.tags.get(PROCESS_TAG, ""))]
    for run in orphans:
        _mark_killed(client, run.info.run_id)
        parent_id = run.data.tags.get(PARENT_TAG)
        if parent_id:
            parent = client.get_run(parent_id)
            if parent.info.status == "RUNNING" and not _is_alive(parent.data.tags.get(PROCESS_TAG, "")):
                client.set_terminated(parent_id, status="KILLED")  # its pipeline stopped with it
    # A pipeline run is RUNNING while a stage owns it (PROCESS_TAG); a kill just after that stage closed its own
    # run leaves it RUNNING with no stage to find it by, so it is found by its owner's process.
    pipelines = client.search_runs(
        [experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`{TAG_PREFIX}kind` = 'pipeline'",
    )
    for run in pipelines:
        if PROCESS_TAG in run.data.tags and not _is_alive(run.data.tags[PROCESS_TAG]):
            _mark_killed(client, run.info.run_id)
    return [run.info.run_id for run in orphans if run.info.run_name == run_name]


def _running_stage_runs(client, experiment_id: str, parent_id: str | None = None) -> list:
    """Stage runs the store marks RUNNING (those of one pipeline run, when given), alive or not."""
    of_parent = f" and tags.`{PARENT_TAG}` = '{parent_id}'" if parent_id else ""
    return client.search_runs(
        [experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`{TAG_PREFIX}kind` = 'stage'{of_parent}")


def _mark_killed(client, run_id: str) -> None:
    client.set_terminated(run_id, status="KILLED")
    client.set_tag(run_id, f"{TAG_PREFIX}note", "its process ended without closing the run")


def _set_pipeline_status(client, parent_id: str, status: str) -> None:
    """The pipeline run's status, with now as its end time: MLflow cannot clear an end time, so while RUNNING
    it says when the latest stage started, and once ended, when the latest stage ended."""
    client.set_terminated(parent_id, status=status, end_time=int(time.time() * 1000))


def _resume_pipeline(client, parent_id: str) -> None:
    """A stage starting under the pipeline run: it owns the run (an earlier stage may have ended it) and makes it
    RUNNING until it ends; the owner tag first, so close_orphaned_runs elsewhere never sees it ownerless."""
    client.set_tag(parent_id, PROCESS_TAG, _process_tag())
    _set_pipeline_status(client, parent_id, "RUNNING")


def _end_pipeline(client, experiment_id: str, parent_id: str, status: str, own_run_id: str | None) -> None:
    """A stage ending: the pipeline run ends with it (its end time, its outcome), unless another of its stages still
    runs (stages run side by side under one LMTRANSFER_PIPELINE_ID): that one then owns it, and ends it."""
    others = [run for run in _running_stage_runs(client, experiment_id, parent_id)
              if run.info.run_id != own_run_id and _is_alive(run.data.tags.get(PROCESS_TAG, ""))]
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
    experiment_id = _experiment_id(client, experiment_name(), root, user_store)
    group = pipeline_id()
    common_tags = {
        f"{TAG_PREFIX}pipeline_id": group,
        "git_commit": git_commit(),
        **({"dvc_exp_name": os.environ["DVC_EXP_NAME"]} if os.environ.get("DVC_EXP_NAME") else {}),
        **({"dvc_exp_baseline": os.environ["DVC_EXP_BASELINE_REV"]} if os.environ.get("DVC_EXP_BASELINE_REV") else {}),
    }
    parent_id = _pipeline_parent(client, experiment_id, group, common_tags, root)
    tags = _stage_tags(client, experiment_id, stage, run_name or stage, common_tags, parent_id, upstream_run_id)
    if clear_snapshots is not None:
        _clear_snapshots_of_finished_stages(client, experiment_id, clear_snapshots)
    _resume_pipeline(client, parent_id)  # after close_orphaned_runs: a killed earlier attempt may have ended it
    status, run_id = "FAILED", None
    try:
        continued = handed_over()  # a training handed over to this process: its run goes on
        with (mlflow.start_run(run_id=continued["run_id"]) if continued and continued.get("run_id") else
              mlflow.start_run(experiment_id=experiment_id, run_name=run_name or stage, tags=tags)) as run:
            run_id = run.info.run_id
            mlflow.log_params(flatten(params))
            yield run
        status = "FINISHED"
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (harness.stage): stopped, not broken
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
            _while_stopping(lambda: _end_pipeline(client, experiment_id, parent_id, status, run_id))
        else:
            _end_pipeline(client, experiment_id, parent_id, status, run_id)


def _stage_tags(client, experiment_id: str, stage: str, run_name: str, common_tags: dict[str, str], parent_id: str,
                upstream_run_id: str | None) -> dict[str, str]:
    """A stage run's tags: nested under the pipeline run (the tag nests it; start_run(parent_run_id=...) would
    also check that the parent is active), its process, and the earlier attempts it follows (closed here)."""
    tags = {**common_tags, f"{TAG_PREFIX}kind": "stage", "stage": stage, PARENT_TAG: parent_id,
            PROCESS_TAG: _process_tag()}
    if upstream_run_id:
        tags["upstream_run_id"] = upstream_run_id
    orphans = close_orphaned_runs(client, experiment_id, run_name)
    if orphans:
        tags[PREVIOUS_ATTEMPT_TAG] = ",".join(orphans)
    return tags


def _clear_snapshots_of_finished_stages(client, experiment_id: str, clear: Callable[[set[str]], list[str]]) -> None:
    """The resume snapshots of every stage whose run is no longer alive, removed by `clear`."""
    alive = {run.info.run_name for run in _running_stage_runs(client, experiment_id)
             if _is_alive(run.data.tags.get(PROCESS_TAG, ""))}
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
