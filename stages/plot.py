"""Stage plot: the experiment's figures from the metrics files."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_classification_params
from lmtransfer.classification.plots import run_plot_stage
from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main


@stage_main("plot")
def main() -> None:
    run_plot_stage(load_classification_params(PARAMS))


if __name__ == "__main__":
    main()
