"""Stage pretrain@<seed>: next-token or masked-token pretraining of the Transformer LM (or loading
`pretrain.init_from`), plus samples: continuations (clm) or fill-in-the-blank predictions (mlm).

    python stages/pretrain.py --seed 0   # models/pretrained/seed0.pt, metrics/pretrain/seed0.json, ...

dvc.yaml runs one stage per seed in `pretrain.seeds`, so adding a seed runs only its pretraining and fine-tunes.
"""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_classification_params
from lmtransfer.core.paths import PARAMS
from lmtransfer.harness.stage import stage_main
from lmtransfer.pretraining.pretrain_stage import run_pretrain_stage
from lmtransfer.training.stage_args import parse_pretrain_args

ARGS = parse_pretrain_args()  # --seed P


@stage_main(ARGS.stage)
def main() -> None:
    run_pretrain_stage(load_classification_params(PARAMS), ARGS.seed, ARGS.outputs)


if __name__ == "__main__":
    main()
