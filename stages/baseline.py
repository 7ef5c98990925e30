"""Stage baseline: TF-IDF + logistic regression on the same splits, the reference line for every result."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.baseline import run_baseline_stage
from lmtransfer.classification.config import load_classification_params
from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main


@stage_main("baseline")
def main() -> None:
    run_baseline_stage(load_classification_params(PARAMS))


if __name__ == "__main__":
    main()
