"""Translation stage pretrain (run from translation/): next-token or masked-token pretraining of the Transformer LM (or loading `pretrain.init_from`),
plus samples: continuations (clm) or fill-in-the-blank predictions (mlm)."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.core.paths import PARAMS, PretrainOutputs
from lmtransfer.harness.stage import stage_main
from lmtransfer.pretraining.stage import run_pretrain_stage
from lmtransfer.translation.config import load_translation_params


@stage_main("pretrain")
def main() -> None:
    params = load_translation_params(PARAMS)
    run_pretrain_stage(params, params.train.seed, PretrainOutputs())


if __name__ == "__main__":
    main()
