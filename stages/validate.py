"""Stage validate: check every input before any stage runs; write the manifest of external files.

Runs on every `dvc repro` (always_changed) and takes a second or so; a broken
input stops the pipeline here, with every earlier output still in place.
"""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_classification_params
from lmtransfer.classification.inputs import run_validate_stage
from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main


@stage_main("validate")
def main() -> None:
    run_validate_stage(load_classification_params(PARAMS))


if __name__ == "__main__":
    main()
