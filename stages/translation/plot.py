"""Translation stage plot: fine-tuning curves, pretraining curves and the test scores, from the metrics files."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main
from lmtransfer.translation.config import load_translation_params
from lmtransfer.translation.plots import run_plot_stage


@stage_main("plot")
def main() -> None:
    run_plot_stage(load_translation_params(PARAMS))


if __name__ == "__main__":
    main()
