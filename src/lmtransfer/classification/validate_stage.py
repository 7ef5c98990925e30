"""The validate stage: every check of classification/inputs.py, then each reading stage's manifest of the external
files it reads, before DVC touches any output."""

from __future__ import annotations

from lmtransfer.classification.config import ClassificationParams, shipped_classification_params
from lmtransfer.classification.inputs import check_inputs, design_cost


def run_validate_stage(params: ClassificationParams) -> None:
    from lmtransfer.core.io import write_json
    from lmtransfer.core.paths import INPUTS
    from lmtransfer.harness.tracking import check_store

    manifests = check_inputs(params)
    # a broken or read-only MLflow store stops here, before DVC removes any later stage's outputs
    check_store()
    shipped = shipped_classification_params(params)
    for note in params.pretrain.ignored_settings(shipped.pretrain):
        print(f"validate: note: {note}")
    cost = design_cost(params, shipped)
    if cost:
        print(f"validate: note: {cost}")
    for name, entries in manifests.items():
        write_json(INPUTS / f"{name}.json", {"inputs": entries})
    described = ", ".join(f"{e['key']}={e['path']}" for entries in manifests.values() for e in entries)
    print(f"validate: inputs ok ({described}) -> {INPUTS}/")
