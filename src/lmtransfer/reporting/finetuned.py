"""What the fine-tune stages wrote, as evaluate and plot read it (`2-0`: pretraining run 2, fine-tuning seed 0).
A stage dependency (which models get evaluated decides the results)."""

from __future__ import annotations

from pathlib import Path

from lmtransfer.core.io import read_tsv, require_file
from lmtransfer.core.paths import VARIANTS, finetune_epochs, finetune_run, finetuned_checkpoint


def run_grid(pretrain_seeds: list[int], seeds: list[int]) -> list[tuple[int, int]]:
    return [(pretrain_seed, seed) for pretrain_seed in pretrain_seeds for seed in seeds]


def run_names(pretrain_seeds: list[int], seeds: list[int]) -> list[str]:
    return [finetune_run(seed, pretrain_seed) for pretrain_seed, seed in run_grid(pretrain_seeds, seeds)]


def finetuned_checkpoints(runs: list[str] | list[int]) -> dict[tuple[str, str | int], Path]:
    return {(v, r): require_file(finetuned_checkpoint(v, r), f"fine-tuned {v} model") for v in VARIANTS for r in runs}


def epoch_logs(runs: list[str] | list[int]) -> dict[str, list[list[dict]]]:
    return {v: [read_tsv(require_file(finetune_epochs(v, r), "fine-tuning metrics")) for r in runs] for v in VARIANTS}
