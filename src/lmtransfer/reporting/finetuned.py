"""What the fine-tune stages wrote, as the evaluate and plot stages read it: one checkpoint and one epoch log per
variant and run (`2-0`: pretraining run 2, fine-tuning seed 0; the translation task's runs are its seeds), each
required to exist.

Which models get evaluated decides the results, so this lives among the stage's dependencies (never in
`harness/`, which DVC does not watch)."""

from __future__ import annotations

from pathlib import Path

from lmtransfer.core.io import read_tsv, require_file
from lmtransfer.core.paths import VARIANTS, finetune_epochs, finetune_run, finetuned_checkpoint


def run_grid(pretrain_seeds: list[int], seeds: list[int]) -> list[tuple[int, int]]:
    """(pretraining seed, fine-tuning seed) of every fine-tune of one variant: each pretraining run with each seed."""
    return [(pretrain_seed, seed) for pretrain_seed in pretrain_seeds for seed in seeds]


def run_names(pretrain_seeds: list[int], seeds: list[int]) -> list[str]:
    """`0-0`, `1-0`, ...: the runs of `run_grid` as their stages and files name them."""
    return [finetune_run(seed, pretrain_seed) for pretrain_seed, seed in run_grid(pretrain_seeds, seeds)]


def finetuned_checkpoints(runs: list[str] | list[int]) -> dict[tuple[str, str | int], Path]:
    """(variant, run) -> its checkpoint, for both variants and every run; a missing one stops the stage."""
    return {(v, r): require_file(finetuned_checkpoint(v, r), f"fine-tuned {v} model") for v in VARIANTS for r in runs}


def epoch_logs(runs: list[str] | list[int]) -> dict[str, list[list[dict]]]:
    """variant -> per run, in `runs`' order, its per-epoch rows (`metrics/finetune/<variant>/seed<run>.tsv`)."""
    return {v: [read_tsv(require_file(finetune_epochs(v, r), "fine-tuning metrics")) for r in runs] for v in VARIANTS}
