"""Translation stage pretrain@<seed> (run from translation/): next-token or masked-token pretraining of the
Transformer LM on the text of both languages (or loading `pretrain.init_from`), plus samples.

    python ../stages/translation/pretrain.py --seed 0   # models/pretrained/seed0.pt, metrics/pretrain/seed0.json, ...

translation/dvc.yaml runs one stage per seed in `pretrain.seeds`, as the classification pipeline does."""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main
from lmtransfer.pretraining.pretrain_stage import run_pretrain_stage
from lmtransfer.training.stage_args import parse_pretrain_args
from lmtransfer.translation.config import load_translation_params

ARGS = parse_pretrain_args()  # --seed P


@stage_main(ARGS.stage)
def main() -> None:
    run_pretrain_stage(load_translation_params(PARAMS), ARGS.seed, ARGS.outputs)


if __name__ == "__main__":
    main()
