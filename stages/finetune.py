"""Stage finetune_pretrained@<seed> / finetune_scratch@<seed>: the same fine-tuning, two initialisations.

    python stages/finetune.py --init pretrained --seed 0   # base from models/pretrained.pt
    python stages/finetune.py --init scratch --seed 0      # same network, random weights

dvc.yaml runs one stage per variant and seed in `finetune.seeds`, so adding a seed
runs only that seed's two fine-tunes.
"""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_classification_params
from lmtransfer.classification.finetune import run_finetune_stage
from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main
from lmtransfer.training.stage_args import parse_finetune_args

ARGS = parse_finetune_args()  # --init pretrained|scratch [--pretrain-seed P] --seed N


@stage_main(ARGS.stage)
def main() -> None:
    run_finetune_stage(load_classification_params(PARAMS), ARGS)


if __name__ == "__main__":
    main()
