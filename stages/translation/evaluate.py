"""Translation stage evaluate: every fine-tuned seed of both variants translates the test split (beam search) and
the test verses' clause pairs (short sentences); BLEU and chrF with sacreBLEU, the gap and its interval; the
translations beside the references."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main
from lmtransfer.translation.config import load_translation_params
from lmtransfer.translation.evaluate_stage import run_evaluate_stage


@stage_main("evaluate")
def main() -> None:
    run_evaluate_stage(load_translation_params(PARAMS))


if __name__ == "__main__":
    main()
