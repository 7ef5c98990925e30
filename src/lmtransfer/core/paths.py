"""Where each stage reads and writes, relative to the pipeline's folder (mirrors dvc.yaml)."""

from dataclasses import dataclass
from pathlib import Path

PARAMS = Path("params.yaml")
INPUTS = Path("data/inputs")  # what the validate stage checked: external files and hashes, one manifest per reader
PREPARED = Path("data/prepared")  # the labeled splits (fine-tuning, baseline)
PREPARED_CORPUS = Path("data/prepared_corpus")  # the pretraining corpus, apart: a corpus change reruns no fine-tune
TOKENIZED = Path("data/tokenized")  # the tokenizer and the labeled splits as ids
TOKENIZED_CORPUS = Path("data/tokenized_corpus")  # the corpus as ids: only pretraining reads it
MODELS = Path("models")
FINETUNED = MODELS / "finetuned"  # <variant>/seed<N>.pt, one per fine-tuning stage
METRICS = Path("metrics")
FINETUNE_METRICS = METRICS / "finetune"  # <variant>/seed<run>.json (summary) and seed<run>.tsv (per epoch)
BASELINE_METRICS = METRICS / "baseline.json"
EVALUATE_REPORT = METRICS / "evaluate.json"  # every detail of the test evaluation
HEADLINE = METRICS / "headline.json"  # the answer in ten flat numbers: the one file dvc.yaml declares as metrics
EVALUATE_DETAILS = METRICS / "evaluate"  # confusion.json, curves.tsv, predictions_<variant>.csv
PLOTS = Path("plots")
TIMINGS = Path("timings")  # wall-clock figures: git-ignored, not DVC outputs, so results stay byte-identical
VARIANTS = ("pretrained", "scratch")
TRANSLATION_ROOT = Path("translation")  # the translation pipeline's folder: its own params, dvc.yaml and outputs


@dataclass(frozen=True)
class PretrainOutputs:
    """What one pretraining run writes: classification's per seed (`pretrain@<seed>`, `.../seed<seed>.pt`),
    translation's once (`seed=None`: `models/pretrained.pt`)."""

    seed: int | None = None

    stage = property(lambda self: "pretrain" if self.seed is None else f"pretrain@{self.seed}")
    checkpoint = property(lambda self: MODELS / ("pretrained.pt" if self.seed is None else
                                                 f"pretrained/seed{self.seed}.pt"))
    summary = property(lambda self: METRICS / ("pretrain.json" if self.seed is None else
                                               f"pretrain/seed{self.seed}.json"))
    folder = property(lambda self: METRICS / "pretrain" / ("" if self.seed is None else f"seed{self.seed}"))
    train_log = property(lambda self: self.folder / "train.tsv")
    valid_log = property(lambda self: self.folder / "valid.tsv")
    samples = property(lambda self: self.folder / "samples.txt")


def corpus_dir(directory: Path) -> Path:
    """The corpus folder beside a data folder: `data/tokenized` -> `data/tokenized_corpus`."""
    directory = Path(directory)
    return directory.with_name(f"{directory.name}_corpus")


def finetune_run(seed: int, pretrain_seed: int | None = None) -> str:
    """A fine-tune's name in its variant: `<pretrain seed>-<fine-tune seed>` (a scratch run's first number seeds
    its random start) or the seed alone (translation)."""
    return str(seed) if pretrain_seed is None else f"{pretrain_seed}-{seed}"


def finetuned_checkpoint(variant: str, run: str | int) -> Path:
    return FINETUNED / variant / f"seed{run}.pt"


def finetune_summary(variant: str, run: str | int) -> Path:
    return FINETUNE_METRICS / variant / f"seed{run}.json"


def finetune_epochs(variant: str, run: str | int) -> Path:
    return FINETUNE_METRICS / variant / f"seed{run}.tsv"


def predictions_file(variant: str) -> Path:
    return EVALUATE_DETAILS / f"predictions_{variant}.csv"


def stage_file_name(stage: str) -> str:
    """`finetune_scratch@2-0` -> `finetune_scratch_seed2-0`."""
    return stage.replace("@", "_seed")


def timings_file(stage: str) -> Path:
    return TIMINGS / f"{stage_file_name(stage)}.json"
