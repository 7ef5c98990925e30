"""Where each stage reads and writes, relative to the repository root (mirrors dvc.yaml).

The inside of `data/prepared/` and `data/tokenized/` (and of their `*_corpus` siblings) belongs
to `data.prepared` and `tokenized`, the modules that write and read those folders.
"""

from pathlib import Path

PARAMS = Path("params.yaml")
INPUTS = Path("data/inputs")  # what the validate stage checked: external files and hashes, one manifest per reader
PREPARED = Path("data/prepared")  # the labeled splits (fine-tuning, baseline)
PREPARED_CORPUS = Path("data/prepared_corpus")  # the pretraining corpus, apart: a corpus change reruns no fine-tune
TOKENIZED = Path("data/tokenized")  # the tokenizer and the labeled splits as ids
TOKENIZED_CORPUS = Path("data/tokenized_corpus")  # the corpus as ids: only pretraining reads it
MODELS = Path("models")
PRETRAINED = MODELS / "pretrained.pt"
FINETUNED = MODELS / "finetuned"  # <variant>/seed<N>.pt, one per fine-tuning stage
METRICS = Path("metrics")
PRETRAIN_SUMMARY = METRICS / "pretrain.json"
PRETRAIN_TRAIN_LOG = METRICS / "pretrain" / "train.tsv"
PRETRAIN_VALID_LOG = METRICS / "pretrain" / "valid.tsv"
PRETRAIN_SAMPLES = METRICS / "pretrain" / "samples.txt"
FINETUNE_METRICS = METRICS / "finetune"  # <variant>/seed<N>.json (summary) and seed<N>.tsv (per epoch)
BASELINE_METRICS = METRICS / "baseline.json"
EVALUATE_REPORT = METRICS / "evaluate.json"  # every detail of the test evaluation
HEADLINE = METRICS / "headline.json"  # the answer in ten flat numbers: the one file dvc.yaml declares as metrics
EVALUATE_DETAILS = METRICS / "evaluate"  # confusion.json, curves.tsv, predictions_<variant>.csv
PLOTS = Path("plots")
# Wall-clock figures (seconds, tokens/s): git-ignored and not DVC outputs, so results stay byte-identical.
TIMINGS = Path("timings")
VARIANTS = ("pretrained", "scratch")
TRANSLATION_ROOT = Path("translation")  # the translation pipeline's folder: its own params, dvc.yaml and outputs


def finetuned_checkpoint(variant: str, seed: int) -> Path:
    return FINETUNED / variant / f"seed{seed}.pt"


def finetune_summary(variant: str, seed: int) -> Path:
    return FINETUNE_METRICS / variant / f"seed{seed}.json"


def finetune_epochs(variant: str, seed: int) -> Path:
    return FINETUNE_METRICS / variant / f"seed{seed}.tsv"


def predictions_file(variant: str) -> Path:
    return EVALUATE_DETAILS / f"predictions_{variant}.csv"


def timings_file(stage: str) -> Path:
    return TIMINGS / f"{stage}.json"
