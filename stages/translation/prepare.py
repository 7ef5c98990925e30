"""Translation stage prepare: sentence pairs (bible-en-fr or your files) split leak-free -> data/prepared/, and the
pretraining text of both languages -> data/prepared_corpus/ (paths inside translation/)."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main
from lmtransfer.translation.config import load_translation_params
from lmtransfer.translation.prepare_stage import run_prepare_stage


@stage_main("prepare")
def main() -> None:
    params = load_translation_params(PARAMS)
    run_prepare_stage(params, params.sections("data"))


if __name__ == "__main__":
    main()
