"""Stage validate (every `dvc repro`, a second or so): check every input before any stage runs, every earlier
output kept; write the manifest of external files."""

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
