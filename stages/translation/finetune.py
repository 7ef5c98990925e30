"""Translation stage finetune_pretrained@<seed> / finetune_scratch@<seed>: the encoder–decoder from two starts.

    python ../stages/translation/finetune.py --init pretrained --seed 0   # warm start from models/pretrained.pt
    python ../stages/translation/finetune.py --init scratch --seed 0      # same network, random weights

Run from translation/ (translation/dvc.yaml does). Same recipe for both variants:
`finetune.*` of translation/params.yaml.
"""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main
from lmtransfer.training.stage_args import parse_finetune_args
from lmtransfer.translation.config import load_translation_params
from lmtransfer.translation.training import run_finetune_stage

ARGS = parse_finetune_args()  # --init pretrained|scratch [--pretrain-seed P] --seed N


@stage_main(ARGS.stage)
def main() -> None:
    run_finetune_stage(load_translation_params(PARAMS), ARGS)


if __name__ == "__main__":
    main()
