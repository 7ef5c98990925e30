"""The command lines of the pretrain (`--seed 2`) and fine-tune stages (`--init pretrained --pretrain-seed 2
--seed 0`), parsed by the stage script itself; nothing under src/ reads `sys.argv` (torchrun's relaunch passes it)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from lmtransfer.core.paths import VARIANTS, PretrainOutputs, finetune_run


@dataclass(frozen=True)
class PretrainArgs:
    """`--seed P`: the pretraining run this process trains."""

    seed: int

    @property
    def stage(self) -> str:
        return PretrainOutputs(self.seed).stage  # `pretrain@2`

    @property
    def outputs(self) -> PretrainOutputs:
        return PretrainOutputs(self.seed)


@dataclass(frozen=True)
class FinetuneArgs:
    """`--init pretrained|scratch [--pretrain-seed P] --seed N`: the fine-tune this process runs."""

    init: str
    seed: int
    pretrain_seed: int | None = None
    labels: int | None = None  # the label curve's runs: trained on this many labeled examples

    @property
    def stage(self) -> str:
        """`finetune_pretrained@2-0`, or `finetune_pretrained_labels@300-2-0` (300 labeled examples)."""
        run = finetune_run(self.seed, self.pretrain_seed)
        return f"finetune_{self.init}@{run}" if self.labels is None else f"finetune_{self.init}_labels@{self.labels}-{run}"


def parse_pretrain_args(argv: Sequence[str] | None = None) -> PretrainArgs:
    parser = argparse.ArgumentParser(description="one pretraining run")
    parser.add_argument("--seed", type=int, required=True, help="the pretraining seed, one of pretrain.seeds")
    return PretrainArgs(parser.parse_args(argv).seed)


def parse_finetune_args(argv: Sequence[str] | None = None) -> FinetuneArgs:
    parser = argparse.ArgumentParser(description="fine-tune one variant with one seed")
    parser.add_argument("--init", choices=VARIANTS, required=True)
    parser.add_argument("--pretrain-seed", type=int, default=None,
                        help="the pretraining run (pretrained) or the random start's seed (scratch)")
    parser.add_argument("--seed", type=int, required=True, help="fine-tuning seed: head init, dropout, batch order")
    parser.add_argument("--labels", type=int, default=None,
                        help="train on this many labeled examples (one of finetune.label_sizes: the label curve)")
    args = parser.parse_args(argv)
    return FinetuneArgs(args.init, args.seed, args.pretrain_seed, args.labels)
