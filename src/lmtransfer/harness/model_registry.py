"""The Model Registry: the evaluate stage registers the pretrained variant's best fine-tune (chosen on validation,
never test) as a version of `lmtransfer-<task>` and points the `champion` alias at it.

A version carries the checkpoint's sha256, the gap with its interval, the git commit and the params' hash as tags;
an evaluate that reruns on the same checkpoint and the same numbers adds no version, it only points the alias
again. Serving: `mlflow models serve -m models:/lmtransfer-classification@champion --env-manager local`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from lmtransfer.core.io import sha256_of
from lmtransfer.harness.pipeline_runs import git_commit
from lmtransfer.harness.run_tags import TAG_PREFIX
from lmtransfer.harness.tracking_store import project_root

CHAMPION = "champion"  # the alias of the version to serve
CHECKPOINT_TAG = "checkpoint_sha256"  # a version's checkpoint: what "the same model" means
MODEL_ID_TAG = f"{TAG_PREFIX}model_id"  # on a fine-tune's run: the id of the MLflow model it logged


def registered_name(task: str) -> str:
    """`lmtransfer-<task>` for the repository's own pipeline; `lmtransfer-<task>-<profile>` for a profile's
    experiment (`lmtransfer profile NAME`: profiles/NAME.yaml), whose models answer another question."""
    profile = os.environ.get("DVC_EXP_NAME", "")
    return f"lmtransfer-{task}-{profile}" if profile and (project_root() / "profiles" / f"{profile}.yaml").is_file() \
        else f"lmtransfer-{task}"


def params_hash(params: dict[str, Any]) -> str:
    """sha256 of the parameters as JSON (keys sorted): two versions with one hash came from one recipe."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


def register_champion(task: str, run_id: str, checkpoint: str | Path, tags: dict[str, Any]) -> str | None:
    """Register the model the run `run_id` logged as a version of `registered_name(task)` with `tags`, the
    checkpoint's sha256 and the git commit, unless a version with that checkpoint and those tags exists (the commit
    aside: the same model and numbers at a later commit are the same version); point CHAMPION at it.
    Returns the version ('' when the run logged no model: a note says so)."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient()
    model_id = client.get_run(run_id).data.tags.get(MODEL_ID_TAG) if run_id else None
    name = registered_name(task)
    if not model_id:
        print(f"registry: the best fine-tune's run logged no MLflow model; {name} is left as it is")
        return ""
    identity = {CHECKPOINT_TAG: sha256_of(checkpoint), **{key: str(value) for key, value in tags.items()}}
    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, description="The pretrained variant's best fine-tune, chosen on "
                                                         "validation, registered by the evaluate stage")
    same = [v for v in client.search_model_versions(f"name='{name}'")
            if all(v.tags.get(key) == value for key, value in identity.items())]
    if same:
        version = max(same, key=lambda v: int(v.version)).version
    else:
        version = mlflow.register_model(f"models:/{model_id}", name, tags={**identity, "git_commit": git_commit()}).version
    client.set_registered_model_alias(name, CHAMPION, version)
    print(f"registry: {name} version {version} ({'already registered' if same else 'new'}) is @{CHAMPION}")
    return str(version)
