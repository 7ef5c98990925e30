"""Stage prepare: raw source -> labeled splits (given ones kept as given, train deduplicated and leak-free, missing
ones carved) in data/prepared/ + the pretraining corpus in data/prepared_corpus/."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_classification_params
from lmtransfer.classification.data.prepare import run_prepare_stage
from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main


@stage_main("prepare")
def main() -> None:
    params = load_classification_params(PARAMS)
    run_prepare_stage(params.data, params.sections("data"))


if __name__ == "__main__":
    main()
