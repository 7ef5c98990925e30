"""Where each stage reads and writes, relative to the repository root (mirrors dvc.yaml)."""

from pathlib import Path

PARAMS = Path("params.yaml")
PREPARED = Path("data/prepared")
TOKENIZED = Path("data/tokenized")
MODELS = Path("models")
PRETRAINED = MODELS / "pretrained.pt"
INPUTS = Path("data/inputs")  # what the validate stage checked: external files and hashes, one manifest per reader
METRICS = Path("metrics")
PLOTS = Path("plots")
VARIANTS = ("pretrained", "scratch")


def finetuned_checkpoint(variant: str) -> Path:
    return MODELS / f"finetuned_{variant}.pt"


def finetune_metrics(variant: str) -> Path:
    return METRICS / f"finetune_{variant}.json"


def finetune_epochs(variant: str, metrics_dir: Path = METRICS) -> Path:
    return metrics_dir / f"finetune_{variant}" / "epochs.tsv"
