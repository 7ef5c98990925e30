"""Typed, validated parameters: one model per `params.yaml` section.

Validation happens before any stage does real work, so a typo such as
`model.n_layer` or an impossible value such as `d_model` not divisible by
`n_heads` stops with one message naming the key, not a traceback an hour later.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .errors import ConfigError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


LABELED_FORMATS = ("auto", "csv", "tsv", "jsonl", "parquet", "pieces")
FILE_KEYS = ("train", "valid", "test", "corpus")


class DataParams(Section):
    source: Literal["movies-en", "reviews-zh", "files"] = "movies-en"
    max_examples: int = Field(0, ge=0)
    max_corpus_lines: int = Field(0, ge=0)
    valid_fraction: float = Field(0.1, gt=0, lt=1)
    test_fraction: float = Field(0.2, gt=0, lt=1)
    corpus_valid_fraction: float = Field(0.02, gt=0, lt=1)
    add_train_to_corpus: bool = True
    seed: int = 0
    # Only for `source: files`. Paths are relative to the repository root.
    train: str = ""
    valid: str = ""  # '' = carved from train (stratified, data.valid_fraction)
    test: str = ""  # '' = carved from train (stratified, data.test_fraction)
    format: Literal[LABELED_FORMATS] = "auto"  # type: ignore[valid-type]
    text_column: str = "text"
    label_column: str = "label"
    corpus: list[str] = Field(default_factory=list)  # files or globs, one document per line
    corpus_format: Literal["text", "pieces"] = "text"
    encoding: str = "utf-8"

    @field_validator("corpus", mode="before")
    @classmethod
    def _one_path_is_a_list(cls, value: Any) -> Any:
        """`-S data.corpus=big.txt` gives a string; a single path is a one-item list."""
        if isinstance(value, str):
            return [value] if value else []
        return value

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown text encoding {value!r} (e.g. utf-8, utf-16, gb18030, latin-1)") from None
        return value

    @model_validator(mode="after")
    def _check(self) -> "DataParams":
        if self.valid_fraction + self.test_fraction >= 0.9:
            raise ValueError("data.valid_fraction + data.test_fraction must leave at least 10% for training")
        if self.source == "files":
            if not self.train:
                raise ValueError("data.train is required when data.source is 'files' (a labeled file)")
            if not (self.text_column and self.label_column):
                raise ValueError("data.text_column and data.label_column must not be empty")
        else:
            used = [key for key in FILE_KEYS if getattr(self, key)]
            if used:
                raise ValueError(
                    f"data.{used[0]} is only read when data.source is 'files' (data.source is {self.source!r})"
                )
        return self

    @property
    def labeled_pieces(self) -> bool:
        return self.source == "files" and self.format == "pieces"

    @property
    def corpus_pieces(self) -> bool:
        """The corpus is pre-cut into pieces; without corpus files it is the labeled train texts."""
        if self.source != "files":
            return False
        return self.corpus_format == "pieces" if self.corpus else self.labeled_pieces


class TokenizerParams(Section):
    vocab_size: int = Field(4000, ge=16)
    model_type: Literal["unigram", "bpe"] = "unigram"
    character_coverage: float = Field(1.0, gt=0, le=1)
    # sentencepiece's text normalisation, applied to the corpus, the labeled texts and every later input
    # alike. The default also folds case: movies-en's dialogue corpus is lower case, its reviews are not.
    normalization: Literal["nmt_nfkc_cf", "nmt_nfkc", "nfkc_cf", "nfkc", "identity"] = "nmt_nfkc_cf"
    max_training_lines: int = Field(500_000, ge=1)
    # Existing tokenizers (paths relative to the repository root); either replaces training one.
    model_file: str = ""  # a sentencepiece .model: cuts raw text into pieces
    vocab_file: str = ""  # a fairseq dictionary (`<piece> <count>` per line): the id space


class ModelParams(Section):
    n_layers: int = Field(4, ge=1)
    d_model: int = Field(200, ge=2)
    n_heads: int = Field(2, ge=1)
    d_ff: int = Field(200, ge=1)
    dropout: float = Field(0.1, ge=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> "ModelParams":
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )
        if self.d_model % 2:
            raise ValueError(f"model.d_model ({self.d_model}) must be even for the sinusoidal encoding")
        return self


class PretrainParams(Section):
    epochs: int = Field(1, ge=1)
    max_steps: int = Field(0, ge=0)
    batch_size: int = Field(32, ge=1)
    seq_len: int = Field(64, ge=2)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(100, ge=0)
    weight_decay: float = Field(0.01, ge=0)
    grad_clip: float = Field(0.5, gt=0)
    eval_every: int = Field(200, ge=1)
    eval_batches: int = Field(20, ge=1)
    prompts: list[str] = Field(default_factory=lambda: ["the movie", "i think"])
    generate_tokens: int = Field(20, ge=1)
    temperature: float = Field(0.8, gt=0)
    top_k: int = Field(40, ge=0)
    init_from: str = ""  # a checkpoint to load instead of training (ours or the original layout)
    # ULMFiT's second step: after the corpus, the language model keeps training on the labeled *train*
    # texts alone (labels unused) for this many epochs, so it learns the task's kind of text.
    adapt_epochs: int = Field(0, ge=0)
    adapt_lr: float = Field(1e-3, gt=0)


class FinetuneParams(Section):
    # Each variant is fine-tuned once per seed (one DVC stage each), all from the same pretrained checkpoint.
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1)
    epochs: int = Field(4, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-4, gt=0)
    # Discriminative learning rates (ULMFiT): the new head learns at lr x head_lr_multiplier, the top
    # Transformer layer at lr, each layer below at layer_lr_decay times the one above, the embedding last.
    head_lr_multiplier: float = Field(1.0, gt=0)
    layer_lr_decay: float = Field(1.0, gt=0, le=1)
    max_len: int = Field(64, ge=3)
    pooling: Literal["last", "mean"] = "last"
    freeze_backbone: bool = False
    grad_clip: float = Field(0.5, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    warmup_steps: int = Field(50, ge=0)

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"finetune.seeds has a repeated seed: {seeds}")
        if any(seed < 0 for seed in seeds):
            raise ValueError(f"finetune.seeds must be non-negative integers: {seeds}")
        return seeds


class TrainParams(Section):
    seed: int = 0
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    num_threads: int = Field(0, ge=0)
    log_every: int = Field(50, ge=1)



class EvaluateParams(Section):
    batch_size: int = Field(64, ge=1)
    bootstrap_samples: int = Field(10_000, ge=100)  # resamples of seeds x test examples for the gap's 95% interval
    permutation_samples: int = Field(10_000, ge=100)  # sign flips for the paired test's p-value
    seed: int = 0  # of the resampling, so the interval is the same number on every run


class BaselineParams(Section):
    """TF-IDF + logistic regression, C tuned on the validation split."""

    word_ngrams: list[int] = Field(default_factory=lambda: [1, 2], min_length=2, max_length=2)
    char_ngrams: list[int] = Field(default_factory=lambda: [2, 5], min_length=2, max_length=2)
    min_df: int = Field(1, ge=1)
    c_values: list[float] = Field(default_factory=lambda: [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0], min_length=1)
    max_iter: int = Field(1000, ge=10)

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


class PlotParams(Section):
    dpi: int = Field(120, ge=30, le=600)


class Params(Section):
    data: DataParams = DataParams()
    tokenizer: TokenizerParams = TokenizerParams()
    model: ModelParams = ModelParams()
    pretrain: PretrainParams = PretrainParams()
    finetune: FinetuneParams = FinetuneParams()
    train: TrainParams = TrainParams()
    evaluate: EvaluateParams = EvaluateParams()
    baseline: BaselineParams = BaselineParams()
    plot: PlotParams = PlotParams()

    @model_validator(mode="after")
    def _check_tokenizer_fits_data(self) -> "Params":
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

    def sections(self, *names: str) -> dict[str, dict[str, Any]]:
        """The named sections as plain dicts (what a stage declares and logs)."""
        return {name: getattr(self, name).model_dump() for name in names}


def _describe(error: dict) -> str:
    key = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        return f"{key}: unknown parameter (check the spelling; see params.yaml in the repository for the known keys)"
    if not key:
        return message
    if message.startswith(key):
        return message
    return f"{key}: {message}"


def parse_params(raw: Any, origin: str = "params") -> Params:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping of sections, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        problems = "\n  ".join(_describe(e) for e in exc.errors())
        raise ConfigError(f"{origin}: invalid parameters:\n  {problems}") from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate a params file; YAML 1.2 so `3e-4` is a float, not a string."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: parameter file not found")
    try:
        raw = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from None
    return parse_params(raw, origin=str(path))
