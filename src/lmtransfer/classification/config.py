"""The classification task's params.yaml: its sections `data`, `finetune`, `evaluate`, `baseline`, beside the shared
ones of `core.config`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from lmtransfer.core.config import (
    PipelineParams,
    PlotParams,
    PretrainParams,
    Section,
    TokenizerParams,
    TrainParams,
    check_seeds,
    committed_version,
    known_encoding,
    parse_section_model,
    path_list,
    pooling_mismatch,
    read_params_file,
    split_task,
)
from lmtransfer.core.errors import ConfigError
from lmtransfer.modeling.model import ModelParams

NAMED_CORPORA = ("imdb-reviews",)  # data.corpus entries that name a pinned corpus, not a file (data/sources.py)


class DataParams(Section):
    source: Literal["movies-en", "reviews-zh", "imdb", "files"] = Field(
        description="`movies-en` or `reviews-zh` (built in), `imdb` (the Large Movie Review Dataset: "
        "25,000 train / 25,000 test reviews as published, fetched once), or `files` (your own: `data.train` and below)"
    )
    max_examples: int = Field(ge=0, description="cap on labeled training examples after deduplication (0 = all)")
    max_corpus_lines: int = Field(
        ge=0, description="cap on unlabeled corpus lines: the first N unique ones (0 = all)"
    )
    valid_fraction: float = Field(
        gt=0, lt=1, description="share of train carved out, stratified, as validation when `data.valid` is `''`"
    )
    test_fraction: float = Field(
        gt=0, lt=1, description="share of train carved out, stratified, as test when `data.test` is `''`"
    )
    corpus_valid_fraction: float = Field(
        gt=0, lt=1, description="share of corpus lines held out to measure the pretraining perplexity"
    )
    add_train_to_corpus: bool = Field(
        description="the labeled *train* texts also join the pretraining corpus (valid and test texts never do)"
    )
    seed: int = Field(description="seed of the stratified train/valid/test split")
    # Only for `source: files`. Paths are relative to the repository root.
    train: str = Field(
        description="`files` only: the labeled file (`.csv`, `.tsv`, `.jsonl`, `.parquet`, or pieces with a "
        "parallel `.label` file); paths are relative to the repository root"
    )
    valid: str = Field(description="`files` only: labeled validation file; `''` = carved from train")
    test: str = Field(description="`files` only: labeled test file; `''` = carved from train")
    format: Literal["auto", "csv", "tsv", "jsonl", "parquet", "pieces"] = Field(
        description="of the labeled files: `auto` (from the extension), `csv`, `tsv`, `jsonl`, `parquet` "
        "or `pieces` (space-separated sentencepiece pieces)"
    )
    text_column: str = Field(description="column (JSONL: field) holding the text")
    label_column: str = Field(
        description="column (JSONL: field) holding the label: any strings or integers, 2 classes or more"
    )
    label_case: Literal["strict", "fold"] = Field(
        description="labels that differ only in case or Unicode form (`pos`, `Pos`): `strict` stops "
        "`validate` naming both; `fold` makes them one class, spelled as most rows spell it. Numeric labels are "
        "compared as numbers (`1` and `1.0` are one class) either way"
    )
    corpus: list[str] = Field(
        description="unlabeled text in place of the source's own: `imdb-reviews` (the 75,000 train and unlabeled "
        "IMDB reviews, never its test reviews; any source), or (`files` only) files or globs, one document per line "
        "(streamed: any size)",
    )
    corpus_format: Literal["text", "pieces"] = Field(
        description="`text`, or `pieces` when the corpus is already cut into sentencepiece pieces"
    )
    encoding: str = Field(
        description="text encoding of the labeled and corpus files (e.g. `utf-16`, `gb18030`, `latin-1`)"
    )
    imdb_from: str = Field(
        description="a local copy of the Large Movie Review Dataset (`aclImdb_v1.tar.gz`, or its unpacked "
        "`aclImdb/` folder), checked against the pinned release; `''` = downloaded once into the dataset cache. Read "
        "when `data.source` is `imdb` or `data.corpus` names `imdb-reviews`"
    )

    _one_path_is_a_list = field_validator("corpus", mode="before")(path_list)
    _known_encoding = field_validator("encoding")(known_encoding)

    @model_validator(mode="after")
    def _check(self) -> DataParams:
        if self.valid_fraction + self.test_fraction >= 0.9:
            raise ValueError("data.valid_fraction + data.test_fraction must leave at least 10% for training")
        if self.source == "files":
            if not self.train:
                raise ValueError("data.train is required when data.source is 'files' (a labeled file)")
            if not (self.text_column and self.label_column):
                raise ValueError("data.text_column and data.label_column must not be empty")
        else:
            used = [key for key in ("train", "valid", "test") if getattr(self, key)]
            files = [entry for entry in self.corpus if entry not in NAMED_CORPORA]
            if used or files:
                key, value = (used[0], getattr(self, used[0])) if used else ("corpus", files[0])
                named = f"; a corpus named {' or '.join(NAMED_CORPORA)} is read with any source" if files else ""
                raise ValueError(
                    f"data.{key} ({value!r}) is only read when data.source is 'files' (data.source is "
                    f"{self.source!r}){named}"
                )
        named = [entry for entry in self.corpus if entry in NAMED_CORPORA]
        if self.corpus_format == "pieces" and named:
            raise ValueError("data.corpus_format is 'pieces' but data.corpus names a corpus of plain text "
                             f"({', '.join(named)}); set data.corpus_format: text")
        if self.imdb_from and not self.reads_imdb:
            raise ValueError("data.imdb_from is only read when data.source is 'imdb' or data.corpus names "
                             "'imdb-reviews'; leave it ''")
        return self

    @property
    def reads_imdb(self) -> bool:
        return self.source == "imdb" or "imdb-reviews" in self.corpus

    @property
    def labeled_pieces(self) -> bool:
        return self.source == "files" and self.format == "pieces"

    @property
    def corpus_pieces(self) -> bool:
        """The corpus is pre-cut into pieces; without corpus files it is the labeled train texts."""
        if self.source != "files" or any(entry in NAMED_CORPORA for entry in self.corpus):
            return False
        return self.corpus_format == "pieces" if self.corpus else self.labeled_pieces


class FinetuneParams(Section):
    # Each variant is fine-tuned once per pretraining seed and fine-tuning seed (one DVC stage each).
    seeds: list[int] = Field(
        min_length=1,
        description="fine-tunes per pretraining run (head init, dropout, batch order); with 2 or more the "
        "report tells the fine-tuning seeds' share of the spread from the pretraining runs'",
    )
    epochs: int = Field(
        ge=1, description="passes over the labeled train split; the epoch with the best validation accuracy is kept"
    )
    batch_size: int = Field(ge=1, description="texts per step")
    batches: Literal["bucketed", "random"] = Field(
        description="how an epoch's texts are grouped: `bucketed` (similar lengths together: least "
        "padding, fastest) or `random` (any texts together, as the original course drew them)"
    )
    lr: float = Field(
        gt=0, description="peak AdamW learning rate of the top Transformer layer (its course over the steps: "
        "`finetune.schedule`)"
    )
    # Discriminative learning rates (ULMFiT): the new head learns at lr x head_lr_multiplier, the top
    # Transformer layer at lr, each layer below at layer_lr_decay times the one above, the embedding last.
    head_lr_multiplier: float = Field(gt=0, description="the new classification head learns at lr × this")
    layer_lr_decay: float = Field(
        gt=0, le=1, description="each layer below the top learns at this × the one above, the embedding last "
        "(1.0 = off; ULMFiT used 0.38)"
    )
    max_len: int = Field(ge=3, description="tokens per text; longer texts keep their first `max_len`")
    pooling: Literal["last", "mean", "first"] = Field(
        description="what the head reads: `mean` (of the non-padding tokens), `last` (the last non-padding "
        "token: causal models) or `first` (the begin-of-text token, BERT's [CLS]: bidirectional models)"
    )
    freeze_backbone: bool = Field(
        description="train the head only; the base's weights stay as they are. Both variants: the scratch "
        "model then trains a head on random features (a fair control)"
    )
    grad_clip: float = Field(gt=0, description="gradients are clipped to this global norm")
    weight_decay: float = Field(ge=0, description="AdamW weight decay (0 = plain Adam, step for step)")
    warmup_steps: int = Field(ge=0, description="steps of linear learning-rate warm-up (0 = none)")
    schedule: Literal["cosine", "constant"] = Field(
        description="after the warm-up: `cosine` decay to a tenth of `lr` at the last step, or `constant` "
        "(the original course's: `lr` throughout)"
    )

    label_sizes: list[int] = Field(
        description="the label curve: numbers of labeled train examples, each a stratified "
        "subset of the train split (nested; the same for both variants and TF-IDF) fine-tuned from every pretraining "
        "run as the full split is (`finetune_<variant>_labels@<size>-<p>-<f>`); `[]` = the full split alone"
    )
    label_seed: int = Field(description="seed of the label curve's subsets")

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        return check_seeds(seeds)

    @field_validator("label_sizes")
    @classmethod
    def _label_sizes(cls, sizes: list[int]) -> list[int]:
        if any(size < 2 for size in sizes) or len(set(sizes)) != len(sizes):
            raise ValueError(f"finetune.label_sizes must be distinct numbers of examples, each 2 or more, got {sizes}")
        return sizes


class EvaluateParams(Section):
    batch_size: int = Field(ge=1, description="test texts per batch")
    bootstrap_samples: int = Field(
        ge=100, description="resamples of pretraining runs × fine-tuning seeds × test examples for the "
        "gap's 95% interval and p-value"
    )
    seed: int = Field(description="seed of the resampling: the interval is the same on every run")


class BaselineParams(Section):
    """TF-IDF + logistic regression, C tuned on the validation split."""

    word_ngrams: list[int] = Field(
        min_length=2, max_length=2,
        description="[low, high]: lengths of the word n-grams among the TF-IDF features",
    )
    char_ngrams: list[int] = Field(
        min_length=2, max_length=2,
        description="[low, high]: lengths of the character n-grams (inside word boundaries)",
    )
    min_df: int = Field(ge=1, description="n-grams in fewer train texts than this are dropped")
    c_values: list[float] = Field(
        min_length=1,
        description="inverse regularisation strengths tried; the best on the validation split is kept",
    )
    max_iter: int = Field(ge=10, description="solver iterations per logistic-regression fit")

    @field_validator("word_ngrams", "char_ngrams")
    @classmethod
    def _ngram_range(cls, value: list[int]) -> list[int]:
        if not 1 <= value[0] <= value[1]:
            raise ValueError(f"an n-gram range is [low, high] with 1 <= low <= high, got {value}")
        return value

    @field_validator("c_values")
    @classmethod
    def _positive(cls, value: list[float]) -> list[float]:
        if any(c <= 0 for c in value):
            raise ValueError(f"baseline.c_values must all be positive, got {value}")
        return value


class ClassificationParams(PipelineParams):
    """The classification task's params.yaml."""

    data: DataParams
    tokenizer: TokenizerParams
    model: ModelParams
    pretrain: PretrainParams
    finetune: FinetuneParams
    train: TrainParams
    evaluate: EvaluateParams
    baseline: BaselineParams
    plot: PlotParams

    @model_validator(mode="after")
    def _check(self) -> ClassificationParams:
        # a loaded checkpoint is the same model under every seed: several would be copies counted as replicates
        if self.pretrain.init_from and len(self.pretrain.seeds) > 1:
            raise ValueError(f"pretrain.seeds: {self.pretrain.seeds} asks for {len(self.pretrain.seeds)} pretraining "
                             f"runs, but pretrain.init_from loads one model (the same under every seed); set "
                             "pretrain.seeds: [0], and finetune.seeds for several fine-tunes of it")
        problem = pooling_mismatch(self.finetune.pooling, self.causal_attention, self.pretrain.objective)
        if problem:
            raise ValueError(problem)
        pieces = self.data.labeled_pieces or self.data.corpus_pieces
        raw_text = not (self.data.labeled_pieces and self.data.corpus_pieces)
        if pieces and not (self.tokenizer.model_file or self.tokenizer.vocab_file):
            raise ValueError(
                "data in `pieces` format is already tokenized: set tokenizer.vocab_file (its dictionary) "
                "or tokenizer.model_file (its sentencepiece model) so the pieces map to the right ids"
            )
        if self.tokenizer.vocab_file and raw_text and not self.tokenizer.model_file:
            raise ValueError(
                "tokenizer.vocab_file only maps pieces to ids; raw text also needs tokenizer.model_file "
                "(the sentencepiece model that produced those pieces)"
            )
        return self


def parse_classification_params(raw: Any, origin: str = "params") -> ClassificationParams:
    """The classification params (a translation file is refused: it belongs to `translation.config`)."""
    task, raw = split_task(raw, origin)
    if task != "classification":
        raise ConfigError(f"{origin}: task: {task}: these are the {task} pipeline's params (translation/params.yaml); "
                          "this stage belongs to the classification pipeline")
    return parse_section_model(ClassificationParams, raw, origin)


def load_classification_params(path: str | Path = "params.yaml") -> ClassificationParams:
    return parse_classification_params(read_params_file(path), origin=str(path))


def shipped_classification_params(current: ClassificationParams, path: str | Path = "params.yaml") -> ClassificationParams:
    """The params file as the last commit has it (the design the project ships), else `current`."""
    raw = committed_version(path)
    try:
        return parse_classification_params(raw, f"{path} at HEAD") if raw is not None else current
    except ConfigError:  # the commit's file no longer validates (a key renamed since): compare with nothing
        return current
