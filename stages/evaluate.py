"""Stage evaluate: every fine-tuned seed of both variants on the test split, the gap and its uncertainty."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_classification_params
from lmtransfer.classification.evaluate import run_evaluate_stage
from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main


@stage_main("evaluate")
def main() -> None:
    run_evaluate_stage(load_classification_params(PARAMS))


if __name__ == "__main__":
    main()
