"""What the fine-tune stages wrote, as the evaluate and plot stages read it: one checkpoint and one epoch log per
variant and seed, each required to exist.

Which models get evaluated decides the results, so this lives among the stage's dependencies (never in
`harness/`, which DVC does not watch)."""

from __future__ import annotations

from pathlib import Path

from lmtransfer.core.io import read_tsv, require_file
from lmtransfer.core.paths import VARIANTS, finetune_epochs, finetuned_checkpoint


def finetuned_checkpoints(seeds: list[int]) -> dict[tuple[str, int], Path]:
    """(variant, seed) -> its checkpoint, for both variants and every seed; a missing one stops the stage."""
    return {(v, s): require_file(finetuned_checkpoint(v, s), f"fine-tuned {v} model") for v in VARIANTS for s in seeds}


def epoch_logs(seeds: list[int]) -> dict[str, list[list[dict]]]:
    """variant -> per seed, in `seeds`' order, its per-epoch rows (`metrics/finetune/<variant>_seed<seed>.tsv`)."""
    return {v: [read_tsv(require_file(finetune_epochs(v, s), "fine-tuning metrics")) for s in seeds] for v in VARIANTS}
