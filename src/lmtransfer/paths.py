"""Where each stage reads and writes, relative to the repository root (mirrors dvc.yaml)."""

from pathlib import Path

PARAMS = Path("params.yaml")
PREPARED = Path("data/prepared")
TOKENIZED = Path("data/tokenized")
MODELS = Path("models")
PRETRAINED = MODELS / "pretrained.pt"
FINETUNED = MODELS / "finetuned"  # <variant>/seed<N>.pt, one per fine-tuning stage
INPUTS = Path("data/inputs")  # what the validate stage checked: external files and hashes, one manifest per reader
METRICS = Path("metrics")
FINETUNE_METRICS = METRICS / "finetune"  # <variant>/seed<N>.json (summary) and seed<N>.tsv (per epoch)
BASELINE_METRICS = METRICS / "baseline.json"
PLOTS = Path("plots")
# Wall-clock figures (seconds, tokens/s): git-ignored and not DVC outputs, so results stay byte-identical.
TIMINGS = Path("timings")
VARIANTS = ("pretrained", "scratch")


def finetuned_checkpoint(variant: str, seed: int) -> Path:
    return FINETUNED / variant / f"seed{seed}.pt"


def finetune_summary(variant: str, seed: int) -> Path:
    return FINETUNE_METRICS / variant / f"seed{seed}.json"


def finetune_epochs(variant: str, seed: int) -> Path:
    return FINETUNE_METRICS / variant / f"seed{seed}.tsv"


def timings_file(stage: str) -> Path:
    return TIMINGS / f"{stage}.json"
