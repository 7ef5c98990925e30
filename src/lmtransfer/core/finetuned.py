"""The fine-tuned checkpoints an evaluate stage reads: one per variant and seed, each required to exist.

Which models get evaluated decides the results, so this lives among the stage's dependencies (never in
`harness/`, which DVC does not watch)."""

from __future__ import annotations

from pathlib import Path

from lmtransfer.core.io import require_file
from lmtransfer.core.paths import VARIANTS, finetuned_checkpoint


def finetuned_checkpoints(seeds: list[int]) -> dict[tuple[str, int], Path]:
    """(variant, seed) -> its checkpoint, for both variants and every seed; a missing one stops the stage."""
    return {(v, s): require_file(finetuned_checkpoint(v, s), f"fine-tuned {v} model") for v in VARIANTS for s in seeds}
