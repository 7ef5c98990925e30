"""Stage pretrain@<seed>: next-token or masked-token pretraining of the Transformer LM (or loading
`pretrain.init_from`), plus samples: continuations (clm) or fill-in-the-blank predictions (mlm).

    python stages/pretrain.py --seed 0   # models/pretrained/seed0.pt, metrics/pretrain/seed0.json, ...

dvc.yaml runs one stage per seed in `pretrain.seeds`, so adding a seed runs only its pretraining and fine-tunes.
"""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_params
from lmtransfer.core.paths import PARAMS, PretrainOutputs
from lmtransfer.harness.stage import stage_main
from lmtransfer.pretraining.pretrain_stage import pretrain_seed_arg, pretrain_stage_name, run_pretrain_stage


@stage_main(pretrain_stage_name)
def main() -> None:
    seed = pretrain_seed_arg()
    run_pretrain_stage(load_params(PARAMS), seed, PretrainOutputs(seed))


if __name__ == "__main__":
    main()
