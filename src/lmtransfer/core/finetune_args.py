"""The fine-tune stages' command line, shared by both tasks: `--init pretrained|scratch --seed N`.

dvc.yaml runs one fine-tune stage per variant and seed; the stage's name (`finetune_pretrained@0`)
labels its log lines and its MLflow run.
"""

from __future__ import annotations

import argparse
import functools

from lmtransfer.core.paths import VARIANTS


@functools.cache
def finetune_args() -> argparse.Namespace:
    """`--init` and `--seed` of this process, parsed once (the stage wrapper and the stage both ask)."""
    parser = argparse.ArgumentParser(description="fine-tune one variant with one seed")
    parser.add_argument("--init", choices=VARIANTS, required=True)
    parser.add_argument("--seed", type=int, required=True, help="fine-tuning seed: head init, dropout, batch order")
    return parser.parse_args()


def finetune_stage_name() -> str:
    """`finetune_pretrained@0`: the name dvc.yaml gives this stage."""
    args = finetune_args()
    return f"finetune_{args.init}@{args.seed}"
