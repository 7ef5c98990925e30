"""MLflow tracking: one run per executed stage under one parent run per pipeline execution.

The store is `mlflow.db` and `mlartifacts/` at the repository root (DVC_ROOT first, so `dvc exp run --temp` logs to
the main store), or MLFLOW_TRACKING_URI. Only rank 0 of a torchrun job logs. A run left RUNNING by a dead process is
marked KILLED when the next stage starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import sqlite3
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmtransfer.core import knobs
from lmtransfer.core.config import TASKS, read_params_file
from lmtransfer.core.errors import TrackingStoreError
from lmtransfer.core.io import read_json, require_file, sha256_of
from lmtransfer.core.paths import HEADLINE

STORE, ARTIFACTS = "mlflow.db", "mlartifacts"
KIND_TAG = "lmtransfer.kind"  # "stage" or "pipeline"
PIPELINE_TAG = "lmtransfer.pipeline_id"
PROCESS_TAG = "lmtransfer.process"  # host:pid:start time of the process that owns a stage run
PREVIOUS_ATTEMPT_TAG = "lmtransfer.previous_attempt"  # the killed earlier runs of the same stage
CHECKPOINT_TAG = "lmtransfer.checkpoint_sha256"  # lineage: the run that wrote a checkpoint is found by its hash
MODEL_ID_TAG = "lmtransfer.model_id"  # the MLflow model a fine-tune's run logged
PARENT_TAG = "mlflow.parentRunId"  # what nests a stage run under its pipeline run in the UI
CHAMPION = "champion"  # the registry alias of the version to serve
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}  # the UI opens it on the runs table
UI_WORKFLOW = "workflowType=machine_learning"  # the UI's "Model training" switch


def is_main_process() -> bool:
    return os.environ.get("RANK", "0") == "0"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def project_root() -> Path:
    return Path(os.environ.get("DVC_ROOT") or _git("rev-parse", "--show-toplevel") or ".").resolve()


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / STORE}"


def check_store() -> str:
    """The tracking URI once the store is known usable (a SQLite store built if absent), else a one-line
    TrackingStoreError naming the store and the fix."""
    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        if problem := _sqlite_problem(path):
            raise TrackingStoreError(f"{path} {problem}; nothing was run")
        root = project_root()
        if path.resolve() == root / STORE:
            _check_artifacts(path, root)
        if not path.exists():
            _build(path)
    elif uri.startswith(("http://", "https://")):
        _check_server(uri)
    return uri


def _sqlite_problem(path: Path) -> str | None:
    """What keeps the store at `path` from being used, with the fix; None if usable or absent (or locked by a
    stage beside). A rolled-back write tells a read-only file or folder."""
    if path.is_dir():
        return "is a directory, not an MLflow store (a file): move it away, and the next stage builds a new store there"
    if not path.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30,
                                                isolation_level=None)) as db:
            damage = db.execute("PRAGMA quick_check(1)").fetchone()[0]
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            db.execute("BEGIN IMMEDIATE")
            db.execute("CREATE TABLE _lmtransfer_write_check (x)")
            db.execute("ROLLBACK")
    except sqlite3.OperationalError as error:  # the write failed
        if "locked" in str(error):
            return None
        return (f"cannot be written ({error}): make it and its folder writable, or point MLFLOW_TRACKING_URI at a "
                "store that is")
    except sqlite3.DatabaseError as error:
        damage = str(error)
    if damage != "ok":
        return (f"is damaged (SQLite: {damage}): restore it from a backup (`sqlite3 {path} .recover` may save its "
                "runs), or move it away to start a new store")
    if any(name.startswith("_alembic_tmp_") for name in tables):
        return (f"is half-migrated (an interrupted schema migration): back it up and run `mlflow db upgrade "
                f"sqlite:///{path}`, or move it away to start a new store")
    return None


def _build(path: Path) -> None:
    """Migrations run on a private file, linked into place complete: a kill never leaves a half-migrated store."""
    import psutil
    from mlflow import MlflowClient

    prefix = f".{path.name}.building-"
    for leftover in path.parent.glob(f"{prefix}*"):  # the builds of killed processes
        if not psutil.pid_exists(int(leftover.name.removeprefix(prefix).split("-")[0])):
            leftover.unlink(missing_ok=True)
    building = path.with_name(f"{prefix}{os.getpid()}-{time.monotonic_ns()}")  # MLflow caches a store per URI
    _quiet_mlflow()
    try:
        MlflowClient(f"sqlite:///{building}").search_experiments(max_results=1)
        with contextlib.suppress(FileExistsError):  # a stage beside built one first
            os.link(building, path)
    finally:
        for file in path.parent.glob(f"{building.name}*"):
            file.unlink(missing_ok=True)


def _check_artifacts(store: Path, root: Path) -> None:
    """`mlartifacts/` must be writable; a copied project's experiments are pointed at this checkout's folder (the
    store keeps absolute paths)."""
    folder = root / ARTIFACTS
    try:
        folder.mkdir(exist_ok=True)
        tempfile.NamedTemporaryFile(dir=folder).close()
    except OSError as error:
        raise TrackingStoreError(
            f"{folder} cannot be written ({error.strerror or error}): the runs' artifacts (checkpoints, figures) go "
            "there; make it writable, or point MLFLOW_TRACKING_URI at a store that is; nothing was run") from None
    if not store.exists():
        return
    here = folder.as_uri()
    with contextlib.closing(sqlite3.connect(store, timeout=30)) as db, db:
        try:
            moved = db.execute("SELECT name, artifact_location FROM experiments WHERE experiment_id != 0 AND "
                               "artifact_location LIKE 'file:%' AND artifact_location != ?", (here,)).fetchall()
            db.executemany("UPDATE experiments SET artifact_location = ? WHERE name = ?", [(here, n) for n, _ in moved])
        except sqlite3.OperationalError:  # an empty store, which MLflow fills when it opens it
            moved = []
    for name, location in moved:
        print(f"tracking: experiment '{name}' kept its artifacts in {location} (another checkout: this project was "
              f"copied); its new runs' artifacts go to {here}")


def _check_server(uri: str, timeout: float = 30.0) -> None:
    """One request that reads the server's store, without MLflow's minutes of retries."""
    import urllib.error
    import urllib.request

    probe = f"{uri.rstrip('/')}/api/2.0/mlflow/experiments/get-by-name?experiment_name=lmtransfer-store-check"
    try:
        urllib.request.urlopen(probe, timeout=timeout).close()
    except urllib.error.HTTPError as error:  # 404, no such experiment: the store answered
        if error.code >= 500:
            said = error.read(2000).decode("utf-8", "replace").strip().splitlines()[:1]
            raise TrackingStoreError(
                f"MLFLOW_TRACKING_URI={uri}: the tracking server answers but cannot read its store (HTTP {error.code}"
                f"{': ' + said[0][:200] if said else ''}); check its backend database (the server's log says why), "
                f"or unset MLFLOW_TRACKING_URI to log to the local {STORE}; nothing was run") from None
    except (OSError, ValueError) as error:
        raise TrackingStoreError(
            f"MLFLOW_TRACKING_URI={uri}: no tracking server answers ({getattr(error, 'reason', error)}); start it "
            f"(docs/guide/scale.md, \"Beyond one machine\") or unset MLFLOW_TRACKING_URI to log to the local {STORE}; "
            "nothing was run") from None


def _quiet_mlflow() -> None:
    for name in ("alembic", "mlflow.store", "mlflow.tracking.fluent"):
        logging.getLogger(name).setLevel(logging.WARNING)


def experiment_name(task: str | None = None) -> str:
    """LMTRANSFER_EXPERIMENT, else `lmtransfer` (classification) or `lmtransfer-<task>` (params.yaml's `task`)."""
    task = task or _params_yaml().get("task", "classification")
    return knobs.read(knobs.EXPERIMENT) or ("lmtransfer" if task == "classification" else f"lmtransfer-{task}")


def _params_yaml() -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):  # validate names a broken params.yaml
        raw = read_params_file("params.yaml")
        return raw if isinstance(raw, dict) else {}
    return {}


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'model': {'d_model': 200}} -> {'model.d_model': 200}, as `dvc exp run -S` names the keys."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return flat


def git_commit() -> str:
    return _git("rev-parse", "HEAD") or "unknown"


def pipeline_id() -> str:
    """What groups a pipeline execution's stage runs: LMTRANSFER_PIPELINE_ID, the DVC experiment, the launching
    `dvc` process, or this process alone."""
    import psutil

    if chosen := knobs.read(knobs.PIPELINE_ID):
        return chosen
    if os.environ.get("DVC_EXP_NAME"):
        return f"exp-{os.environ['DVC_EXP_NAME']}"
    with contextlib.suppress(psutil.Error):  # a process gone while looking
        for process in psutil.Process().parents():
            command = " ".join(process.cmdline()[:2])
            if "dvc" in Path(process.name()).name or "/dvc" in command or " dvc" in f" {command}":
                return f"repro-{process.pid}-{_started(process)}"
    return f"standalone-{uuid.uuid4().hex[:12]}"


def _started(process: Any) -> str:
    """When a process started, as Linux's clock ticks since boot: psutil's create_time adds the boot time, which moves
    when the clock is stepped (NTP, a VM resumed), and split one `dvc repro` into two pipeline runs."""
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return str(int(process.create_time()))


def process_tag() -> str:
    import psutil

    return f"{socket.gethostname()}:{os.getpid()}:{_started(psutil.Process())}"


def _alive(tag: str) -> bool:
    """Whether the process of a PROCESS_TAG still runs (on another host: assumed alive)."""
    import psutil

    try:
        host, pid, started = tag.rsplit(":", 2)
        return host != socket.gethostname() or _started(psutil.Process(int(pid))) == started
    except (ValueError, psutil.Error):
        return False


@contextmanager
def stage_run(stage: str, params: dict[str, dict[str, Any]], upstream_run_id: str | None = None,
              run_name: str | None = None,
              clear_snapshots: Callable[[set[str]], list[str]] | None = None) -> Iterator[Any]:
    """The run of one stage with the `params` it declared (None on other ranks). It ends FINISHED, FAILED or KILLED
    (Ctrl-C), its pipeline run too unless another of its stages runs. `clear_snapshots(running)`: evaluate's."""
    if not is_main_process():
        yield None
        return
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    uri = check_store()
    name = run_name or stage
    common = {PIPELINE_TAG: pipeline_id(), "git_commit": git_commit(),
              **{tag: os.environ[var] for tag, var in (("dvc_exp_name", "DVC_EXP_NAME"),
                                                       ("dvc_exp_baseline", "DVC_EXP_BASELINE_REV"))
                 if os.environ.get(var)}}
    try:
        _quiet_mlflow()
        mlflow.set_tracking_uri(uri)
        client = MlflowClient()
        experiment_id = _experiment_id(client, uri)
        parent_id = _pipeline_run(client, experiment_id, common)
        earlier, running = _close_dead_runs(client, experiment_id, parent_id, name)
    except MlflowException as error:  # e.g. a store at an older schema: MLflow's message says what to run
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TrackingStoreError(f"the MLflow store {uri} cannot be used: {first[:300]}; nothing was run") from None
    if clear_snapshots is not None:
        for finished in clear_snapshots(running):
            print(f"resume: the snapshot of {finished} removed: that stage has completed")
    tags = {**common, KIND_TAG: "stage", "stage": stage, PARENT_TAG: parent_id, PROCESS_TAG: process_tag(),
            **({"upstream_run_id": upstream_run_id} if upstream_run_id else {}),
            **({PREVIOUS_ATTEMPT_TAG: ",".join(earlier)} if earlier else {})}
    run = mlflow.start_run(experiment_id=experiment_id, run_name=name, tags=tags)
    status = "FAILED"
    try:
        mlflow.log_params(flatten(params))
        yield run
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        mlflow.end_run(status)
        others = client.search_runs([experiment_id], f"attributes.status = 'RUNNING' and tags.`{PARENT_TAG}` = "
                                                     f"'{parent_id}'")
        if not any(_alive(other.data.tags.get(PROCESS_TAG, "")) for other in others):
            client.set_terminated(parent_id, status)  # the pipeline run ends with its latest stage


def _experiment_id(client, uri: str) -> str:
    """This task's experiment, created on first use (in the project's store: artifacts in mlartifacts/)."""
    experiment = client.get_experiment_by_name(experiment_name())
    if experiment is not None:
        return experiment.experiment_id
    own = uri == f"sqlite:///{project_root() / STORE}"
    return client.create_experiment(experiment_name(), tags=EXPERIMENT_TAGS,
                                    artifact_location=(project_root() / ARTIFACTS).as_uri() if own else None)


def _pipeline_run(client, experiment_id: str, common: dict[str, str]) -> str:
    """This pipeline execution's parent run (every key of params.yaml a param), RUNNING while a stage runs."""
    from mlflow.entities import Param

    found = client.search_runs([experiment_id], f"tags.`{PIPELINE_TAG}` = '{common[PIPELINE_TAG]}' and "
                                                f"tags.`{KIND_TAG}` = 'pipeline'", max_results=1)
    if found:
        client.update_run(found[0].info.run_id, status="RUNNING")
        return found[0].info.run_id
    name = os.environ.get("DVC_EXP_NAME") or time.strftime("pipeline-%Y%m%d-%H%M%S")
    run = client.create_run(experiment_id, run_name=name, tags={**common, KIND_TAG: "pipeline"})
    client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in flatten(_params_yaml()).items()])
    return run.info.run_id


def _close_dead_runs(client, experiment_id: str, own_parent: str, name: str) -> tuple[list[str], set[str]]:
    """Mark KILLED the stage runs whose process is gone and the pipeline runs with no live stage (a run-cache
    restore runs none of our code). Returns stage `name`'s closed attempts and the stages still running."""
    running = client.search_runs([experiment_id], "attributes.status = 'RUNNING'")
    alive = [r for r in running if r.data.tags.get(KIND_TAG) == "stage" and _alive(r.data.tags.get(PROCESS_TAG, ""))]
    keep = {r.info.run_id for r in alive} | {r.data.tags.get(PARENT_TAG) for r in alive} | {own_parent}
    dead = [r for r in running if r.data.tags.get(KIND_TAG) in ("stage", "pipeline") and r.info.run_id not in keep]
    for run in dead:
        client.set_terminated(run.info.run_id, "KILLED")
    return [r.info.run_id for r in dead if r.info.run_name == name], {r.info.run_name for r in alive}


def _mlflow():
    """mlflow in the process that logs (rank 0, or a process on its own), else None."""
    if not is_main_process():
        return None
    import mlflow

    return mlflow


def log_run(tags: dict[str, Any] | None = None, params: dict[str, Any] | None = None,
            metrics: dict[str, Any] | None = None, step: int | None = None) -> None:
    """Tags, params and the numeric metrics (other values left out) on the stage's run."""
    if not (mlflow := _mlflow()):
        return
    if tags:
        mlflow.set_tags(tags)
    if params:
        mlflow.log_params(params)
    numbers = {k: float(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float))}
    if numbers:
        mlflow.log_metrics(numbers, step=step)


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    log_run(metrics=metrics, step=step)


def log_file(content: dict | str | Path, name: str) -> None:
    """A dict (as JSON), a text, or a file (a Path; `name` its folder or '') on the stage's run."""
    if not (mlflow := _mlflow()):
        return
    if isinstance(content, dict):
        mlflow.log_dict(content, name)
    elif isinstance(content, Path):
        mlflow.log_artifact(str(content), name or None)
    else:
        mlflow.log_text(content, name)


def tag_checkpoint(path: str | Path) -> None:
    """The checkpoint's sha256 on the stage's run: how a later stage finds the run that wrote it."""
    if mlflow := _mlflow():
        mlflow.set_tag(CHECKPOINT_TAG, sha256_of(path))


def log_checkpoint(path: str | Path) -> None:
    if mlflow := _mlflow():
        tag_checkpoint(path)
        mlflow.log_artifact(str(path))


def run_that_wrote(path: str | Path) -> str:
    """The latest run tagged with this checkpoint's sha256 ('' if none)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=check_store())
    experiment = client.get_experiment_by_name(experiment_name())
    found = experiment and client.search_runs([experiment.experiment_id], f"tags.`{CHECKPOINT_TAG}` = "
                                              f"'{sha256_of(path)}'", order_by=["attributes.start_time DESC"],
                                              max_results=1)
    return found[0].info.run_id if found else ""


def runs_that_wrote(paths: Iterable[str | Path]) -> str:
    return ",".join(filter(None, (run_that_wrote(path) for path in paths)))


def log_to_pipeline(metrics: dict[str, float]) -> None:
    """Headline numbers on the active stage run's pipeline run: one row per execution in the runs table."""
    import mlflow

    mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=0,
                       run_id=mlflow.active_run().data.tags[PARENT_TAG])


def plot_stage_run(params: Any, draw: Callable[[], list[Path]]) -> None:
    """The plot stage's run: `draw()`'s figures as artifacts, the headline on the pipeline run (as evaluate may
    be skipped)."""
    with stage_run("plot", params.sections("plot")):
        figures = draw()
        for figure in figures:
            log_file(Path(figure), "figures")
        log_to_pipeline(read_json(require_file(HEADLINE, "headline metrics")))
    print("plot: " + ", ".join(str(f) for f in figures))


def log_model(name: str, python_model: Any, checkpoint: str | Path, tokenizer_dir: str | Path, example: Any,
              output: Any, params: dict | None = None, metrics: dict[str, float] | None = None) -> str:
    """`python_model` (pyfunc) as the model `name`, with the checkpoint, the tokenizer and this package's code (no
    repository or network needed to load it), and `metrics` on the model (the Models page's columns). Returns its
    id, also tagged MODEL_ID_TAG."""
    import shutil
    from importlib.metadata import version

    import mlflow
    from mlflow.models import infer_signature

    from lmtransfer.tokens.tokenizer import DICTIONARY_FILE, MODEL_FILE

    # pinned here: MLflow would infer them by importing the model in a subprocess, seconds per fine-tune
    requirements = [f"{n}=={version(n).split('+')[0]}"
                    for n in ("mlflow", "torch", "sentencepiece", "numpy", "pandas", "pydantic")]
    with tempfile.TemporaryDirectory() as folder:
        for file in (MODEL_FILE, DICTIONARY_FILE):  # not the tokenized splits beside them
            if Path(tokenizer_dir, file).is_file():
                shutil.copy2(Path(tokenizer_dir, file), Path(folder, file))
        info = mlflow.pyfunc.log_model(
            name=name, python_model=python_model, artifacts={"checkpoint": str(checkpoint), "tokenizer": folder},
            code_paths=[str(Path(__file__).resolve().parents[1])], signature=infer_signature(example, output, params),
            input_example=example, pip_requirements=requirements)
    mlflow.set_tag(MODEL_ID_TAG, info.model_id)
    if metrics:
        mlflow.log_metrics(metrics, model_id=info.model_id)
    return info.model_id


def log_model_metrics(checkpoint: str | Path, metrics: dict[str, float]) -> None:
    """`metrics` (evaluate's test scores) on the MLflow model logged with this checkpoint, in its fine-tune's run."""
    if not is_main_process():
        return
    from mlflow import MlflowClient

    client = MlflowClient()
    run_id = run_that_wrote(checkpoint)
    model_id = run_id and client.get_run(run_id).data.tags.get(MODEL_ID_TAG)
    if not model_id:  # a checkpoint logged as a file, not as a model
        return
    for key, value in metrics.items():
        client.log_metric(run_id, key, float(value), model_id=model_id)


ANSWER_VIEW = "answer"  # the saved view of the runs table that `make ui` opens: the headline metrics as columns
ANSWER_VIEW_TAG = f"mlflow.sharedViewState.{ANSWER_VIEW}"  # where MLflow's UI keeps a saved view


def show_answer(first_line: str, details: list[str], columns: list[str]) -> None:
    """The answer where the UI shows it first: the experiment's description (its first line is shown above the runs
    table), the pipeline run's description, and a saved view with the headline `columns` of the pipeline runs."""
    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient()
    run = mlflow.active_run()
    note = "\n\n".join([first_line, *details])
    client.set_experiment_tag(run.info.experiment_id, "mlflow.note.content", note)
    client.set_tag(run.data.tags[PARENT_TAG], "mlflow.note.content", note)
    keys = [f"metrics.`{column}`" for column in columns]
    state = {"selectedColumns": keys, "columnOrder": keys, "orderByKey": "attributes.start_time", "orderByAsc": False,
             "searchFilter": "", "startTime": "ALL", "lifecycleFilter": "Active", "datasetsFilter": [],
             "modelVersionFilter": "All Runs"}
    now = int(time.time() * 1000)
    client.set_experiment_tag(run.info.experiment_id, ANSWER_VIEW_TAG, json.dumps(
        {"name": ANSWER_VIEW, "createdAt": now, "updatedAt": now, "state": json.dumps(state)}))


def registered_name(task: str) -> str:
    """`lmtransfer-<task>`, plus `-<profile>` for a profile's experiment (profiles/<profile>.yaml)."""
    profile = os.environ.get("DVC_EXP_NAME", "")
    if profile and (project_root() / "profiles" / f"{profile}.yaml").is_file():
        return f"lmtransfer-{task}-{profile}"
    return f"lmtransfer-{task}"


def params_hash(params: dict[str, Any]) -> str:
    """sha256 of the params as sorted JSON: two versions with one hash came from one recipe."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


def register_champion(task: str, run_id: str, checkpoint: str | Path, tags: dict[str, Any]) -> str:
    """The model run `run_id` logged, as a version of `registered_name(task)` tagged with `tags` and the checkpoint's
    sha256 (an existing version with both is reused), made @champion. Returns the version ('' if none)."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    model_id = client.get_run(run_id).data.tags.get(MODEL_ID_TAG) if run_id else None
    name = registered_name(task)
    if not model_id:
        print(f"registry: the best fine-tune's run logged no MLflow model; {name} is left as it is")
        return ""
    identity = {"checkpoint_sha256": sha256_of(checkpoint), **{key: str(value) for key, value in tags.items()}}
    with contextlib.suppress(MlflowException):  # it exists already
        client.create_registered_model(name, description="The pretrained variant's best fine-tune, chosen on "
                                                         "validation, registered by the evaluate stage")
    same = [v for v in client.search_model_versions(f"name='{name}'")
            if all(v.tags.get(key) == value for key, value in identity.items())]
    version = (max(int(v.version) for v in same) if same else
               mlflow.register_model(f"models:/{model_id}", name, tags={**identity, "git_commit": git_commit()}).version)
    client.set_registered_model_alias(name, CHAMPION, version)
    print(f"registry: {name} version {version} ({'already registered' if same else 'new'}) is @{CHAMPION}")
    return str(version)


def ui_lines(base: str = "http://127.0.0.1:5000") -> list[str]:
    """What `make ui` prints: each task's runs table, or the command that makes some runs."""
    from mlflow import MlflowClient

    store = os.environ.get("MLFLOW_TRACKING_URI") or (project_root() / STORE).is_file()  # never created here
    lines = []
    for task in TASKS:
        experiment = MlflowClient(tracking_uri=tracking_uri()).get_experiment_by_name(experiment_name(task)) \
            if store else None
        if experiment is not None:
            view = f"viewStateShareKey={ANSWER_VIEW}&" if ANSWER_VIEW_TAG in experiment.tags else ""
            lines.append(f"open {base}/#/experiments/{experiment.experiment_id}/runs?{view}{UI_WORKFLOW}  ({task})")
        else:
            target = {"classification": "make run", "translation": "make run-translation"}.get(task, "dvc repro")
            lines.append(f"no {task} runs in this store yet: `{target}` makes them "
                         f"(the UI still opens at {base}/#/experiments?{UI_WORKFLOW})")
    return lines
