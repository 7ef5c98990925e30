"""Typed, validated parameters: one model per `params.yaml` section.

Validation happens before any stage does real work, so a typo such as
`model.n_layer` or an impossible value such as `d_model` not divisible by
`n_heads` stops with one message naming the key, not a traceback an hour later.

Each section's defaults are the values shipped in params.yaml, and each field's
`description` is its documentation: `lmtransfer params` renders the table the
README shows (see params_doc.py).
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


def path_list(value: Any) -> Any:
    """`-S data.corpus=big.txt` gives a string; a single path is a one-item list."""
    if isinstance(value, str):
        return [value] if value else []
    return value


def known_encoding(value: str) -> str:
    """A text encoding Python knows, checked before any file is read with it."""
    try:
        codecs.lookup(value)
    except LookupError:
        raise ValueError(f"unknown text encoding {value!r} (e.g. utf-8, utf-16, gb18030, latin-1)") from None
    return value


LABELED_FORMATS = ("auto", "csv", "tsv", "jsonl", "parquet", "pieces")
FILE_KEYS = ("train", "valid", "test", "corpus")


class DataParams(Section):
    source: Literal["movies-en", "reviews-zh", "files"] = Field(
        "movies-en", description="`movies-en` or `reviews-zh` (built in), or `files` (your own: `data.train` and below)"
    )
    max_examples: int = Field(0, ge=0, description="cap on labeled training examples after deduplication (0 = all)")
    max_corpus_lines: int = Field(
        0, ge=0, description="cap on unlabeled corpus lines: the first N unique ones (0 = all)"
    )
    valid_fraction: float = Field(
        0.1, gt=0, lt=1, description="share of train carved out, stratified, as validation when `data.valid` is `''`"
    )
    test_fraction: float = Field(
        0.2, gt=0, lt=1, description="share of train carved out, stratified, as test when `data.test` is `''`"
    )
    corpus_valid_fraction: float = Field(
        0.02, gt=0, lt=1, description="share of corpus lines held out to measure the pretraining perplexity"
    )
    add_train_to_corpus: bool = Field(
        True, description="the labeled *train* texts also join the pretraining corpus (valid and test texts never do)"
    )
    seed: int = Field(0, description="seed of the stratified train/valid/test split")
    # Only for `source: files`. Paths are relative to the repository root.
    train: str = Field(
        "", description="`files` only: the labeled file (`.csv`, `.tsv`, `.jsonl`, `.parquet`, or pieces with a "
        "parallel `.label` file); paths are relative to the repository root"
    )
    valid: str = Field("", description="`files` only: labeled validation file; `''` = carved from train")
    test: str = Field("", description="`files` only: labeled test file; `''` = carved from train")
    format: Literal[LABELED_FORMATS] = Field(  # type: ignore[valid-type]
        "auto", description="of the labeled files: `auto` (from the extension), `csv`, `tsv`, `jsonl`, `parquet` "
        "or `pieces` (space-separated sentencepiece pieces)"
    )
    text_column: str = Field("text", description="column (JSONL: field) holding the text")
    label_column: str = Field(
        "label", description="column (JSONL: field) holding the label: any strings or integers, 2 classes or more"
    )
    corpus: list[str] = Field(
        default_factory=list,
        description="`files` only: unlabeled text, files or globs, one document per line (streamed: any size)",
    )
    corpus_format: Literal["text", "pieces"] = Field(
        "text", description="`text`, or `pieces` when the corpus is already cut into sentencepiece pieces"
    )
    encoding: str = Field(
        "utf-8", description="text encoding of the labeled and corpus files (e.g. `utf-16`, `gb18030`, `latin-1`)"
    )

    _one_path_is_a_list = field_validator("corpus", mode="before")(path_list)
    _known_encoding = field_validator("encoding")(known_encoding)

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
    vocab_size: int = Field(
        4000, ge=16, description="pieces of the sentencepiece model trained on the corpus, specials included "
        "(`<pad>` 0, `<unk>` 1, `<s>` 2, `</s>` 3, `<mask>` 4)"
    )
    model_type: Literal["unigram", "bpe"] = Field("unigram", description="sentencepiece algorithm: `unigram` or `bpe`")
    character_coverage: float = Field(
        1.0, gt=0, le=1, description="share of the corpus's characters the pieces cover; the rarest others become "
        "`<unk>` (e.g. 0.9995 for Chinese)"
    )
    # sentencepiece's text normalisation, applied to the corpus, the labeled texts and every later input
    # alike. The default also folds case: movies-en's dialogue corpus is lower case, its reviews are not.
    normalization: Literal["nmt_nfkc_cf", "nmt_nfkc", "nfkc_cf", "nfkc", "identity"] = Field(
        "nmt_nfkc_cf", description="sentencepiece's normalisation rule, applied to every text: `nmt_nfkc_cf` = NFKC + "
        "case folding; `nmt_nfkc` keeps case; also `nfkc_cf`, `nfkc`, `identity`"
    )
    max_training_lines: int = Field(
        500_000, ge=1, description="at most this many corpus lines (sampled) train the sentencepiece model; "
        "fewer when they would pass ~64 MB of text (the trainer's memory grows with it)"
    )
    # Existing tokenizers (paths relative to the repository root); either replaces training one.
    model_file: str = Field(
        "", description="an existing sentencepiece `.model` to use instead of training one; it cuts raw text into "
        "pieces"
    )
    vocab_file: str = Field(
        "", description="a fairseq dictionary (`<piece> <count>` per line) as the id space: 0 `<sos>`, 1 `<pad>`, "
        "2 `<eos>`, 3 `<oov>`, then its pieces in file order; raw text also needs `tokenizer.model_file`"
    )


class ModelParams(Section):
    n_layers: int = Field(4, ge=1, description="N: Transformer layers")
    d_model: int = Field(
        200, ge=2, description="D: width of the embeddings and hidden states (even, divisible by `model.n_heads`)"
    )
    n_heads: int = Field(2, ge=1, description="A: attention heads per layer")
    d_ff: int = Field(200, ge=1, description="F: hidden units of each layer's feed-forward block")
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout rate after the embedding and inside every layer")
    # Attention direction is architecture (the scratch twin must match the pretrained model), but it follows
    # from the objective: `auto` resolves it from `pretrain.objective`, so one -S switches both.
    attention: Literal["auto", "causal", "bidirectional"] = Field(
        "auto", description="`causal` (position i sees positions <= i), `bidirectional` (every position sees the "
        "whole text), or `auto`: causal for `pretrain.objective: clm`, bidirectional for `mlm`"
    )

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
    epochs: int = Field(1, ge=1, description="passes over the corpus, when `pretrain.max_steps` is 0")
    max_steps: int = Field(
        500, ge=0, description="steps on the corpus; > 0 overrides `pretrain.epochs` (0 = `epochs` full passes)"
    )
    batch_size: int = Field(32, ge=1, description="sequences per step")
    seq_len: int = Field(64, ge=2, description="tokens per sequence: the corpus is packed into windows this long")
    lr: float = Field(
        2e-3, gt=0, description="peak AdamW learning rate: linear warm-up, then cosine decay to a tenth of it"
    )
    warmup_steps: int = Field(100, ge=0, description="steps of linear learning-rate warm-up")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay")
    grad_clip: float = Field(0.5, gt=0, description="gradients are clipped to this global norm")
    eval_every: int = Field(200, ge=1, description="steps between validation loss and perplexity measurements")
    eval_batches: int = Field(20, ge=1, description="batches per validation measurement")
    prompts: list[str] = Field(
        default_factory=lambda: ["the movie was", "i think that", "this film is"],
        description="continued greedily and by sampling after pretraining (`metrics/pretrain/samples.txt`)",
    )
    generate_tokens: int = Field(20, ge=1, description="tokens generated per prompt")
    temperature: float = Field(0.8, gt=0, description="sampling temperature of the sampled continuations")
    top_k: int = Field(40, ge=0, description="sample among the k likeliest tokens (0 = all)")
    init_from: str = Field(
        "", description="a checkpoint to load instead of pretraining (ours or the original course layout; '' = "
        "pretrain here)"
    )
    # ULMFiT's second step: after the corpus, the language model keeps training on the labeled *train*
    # texts alone (labels unused) for this many epochs, so it learns the task's kind of text.
    adapt_epochs: int = Field(
        5, ge=0, description="then epochs of LM training on the labeled train texts alone, labels unused (ULMFiT's "
        "second step; 0 = off)"
    )
    adapt_lr: float = Field(
        1e-3, gt=0, description="peak learning rate of that phase (warm-up over the phase's first 10% of steps)"
    )
    objective: Literal["clm", "mlm"] = Field(
        "clm", description="`clm`: next-token prediction (causal attention); `mlm`: BERT's masked language "
        "modelling (bidirectional attention; prompts become fill-in-the-blank samples)"
    )
    mask_prob: float = Field(
        0.15, gt=0, lt=1, description="`mlm`: share of each sequence's tokens chosen for prediction (of them 80% "
        "become `<mask>`, 10% a random token, 10% stay)"
    )
    nsp: bool = Field(
        False, description="`mlm`: also next-sentence prediction (consecutive corpus lines vs random ones, 50/50; "
        "segment embeddings, a binary head on position 0); the adaptation phase stays MLM only"
    )
    chunked_loss: Literal["auto", "on", "off"] = Field(
        "auto", description="`clm`: head and softmax computed in chunks of at most 8M logits (128 positions at "
        "V = 50,001), never the whole logits matrix (the same exact softmax; faster, and far less memory for a "
        "large vocabulary; last digits differ); `auto` = on from 2,000 ids"
    )


class FinetuneParams(Section):
    # Each variant is fine-tuned once per seed (one DVC stage each), all from the same pretrained checkpoint.
    seeds: list[int] = Field(
        default_factory=lambda: [0, 1, 2], min_length=1,
        description="one fine-tune per variant and seed, all from the same pretrained model",
    )
    epochs: int = Field(
        2, ge=1, description="passes over the labeled train split; the epoch with the best validation accuracy is kept"
    )
    batch_size: int = Field(32, ge=1, description="texts per step")
    lr: float = Field(
        5e-4, gt=0, description="peak AdamW learning rate of the top Transformer layer (its course over the steps: "
        "`finetune.schedule`)"
    )
    # Discriminative learning rates (ULMFiT): the new head learns at lr x head_lr_multiplier, the top
    # Transformer layer at lr, each layer below at layer_lr_decay times the one above, the embedding last.
    head_lr_multiplier: float = Field(30.0, gt=0, description="the new classification head learns at lr × this")
    layer_lr_decay: float = Field(
        1.0, gt=0, le=1, description="each layer below the top learns at this × the one above, the embedding last "
        "(1.0 = off; ULMFiT used 0.38)"
    )
    max_len: int = Field(64, ge=3, description="tokens per text; longer texts keep their first `max_len`")
    pooling: Literal["last", "mean", "first"] = Field(
        "mean", description="what the head reads: `mean` (of the non-padding tokens), `last` (the last non-padding "
        "token: causal models) or `first` (the begin-of-text token, BERT's [CLS]: bidirectional models)"
    )
    freeze_backbone: bool = Field(
        False, description="train the head only; the base's weights stay as they are. Both variants: the scratch "
        "model then trains a head on random features (a fair control)"
    )
    grad_clip: float = Field(0.5, gt=0, description="gradients are clipped to this global norm")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay (0 = plain Adam, step for step)")
    warmup_steps: int = Field(20, ge=0, description="steps of linear learning-rate warm-up (0 = none)")
    schedule: Literal["cosine", "constant"] = Field(
        "cosine", description="after the warm-up: `cosine` decay to a tenth of `lr` at the last step, or `constant` "
        "(the original course's: `lr` throughout)"
    )

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        return check_seeds(seeds)


def check_seeds(seeds: list[int]) -> list[int]:
    """Seeds name stages (`finetune_scratch@2`) and files: distinct and non-negative."""
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"finetune.seeds has a repeated seed: {seeds}")
    if any(seed < 0 for seed in seeds):
        raise ValueError(f"finetune.seeds must be non-negative integers: {seeds}")
    return seeds


class TrainParams(Section):
    seed: int = Field(0, description="pretraining seed: initial weights, batch order, sample generations")
    device: Literal["auto", "cpu", "cuda", "mps"] = Field(
        "auto", description="`auto` = CUDA, else MPS, else CPU; or `cpu`, `cuda`, `mps`; bf16 autocast on capable GPUs"
    )
    num_threads: int = Field(
        0, ge=0, description="CPU threads (0 = all cores); the count changes the last digits of the results"
    )
    nproc: int = Field(
        1, ge=1, description="processes that train together under torchrun (DDP: gloo on CPU, NCCL on GPUs), each "
        "on its share of every batch; same results within float rounding with `model.dropout: 0` (README "
        "\"Several processes and GPUs\")"
    )
    log_every: int = Field(50, ge=1, description="pretraining steps between logged training metrics")
    compile: bool = Field(
        False, description="`torch.compile` the training steps (fused kernels: faster on GPUs after a compile of "
        "a minute or so; measured slower on a 2-core CPU, README \"Speed\"); the last digits of results differ"
    )
    resume_every: int = Field(
        100, ge=0, description="pretraining steps between resume snapshots in `.resume/` (fine-tuning: every epoch); "
        "`dvc repro` after a kill continues from the last one with the same result; 0 = none. "
        "Not a DVC dependency: it never changes a result",
    )



class EvaluateParams(Section):
    batch_size: int = Field(64, ge=1, description="test texts per batch")
    bootstrap_samples: int = Field(
        10_000, ge=100, description="resamples of seeds × test examples for the gap's 95% interval"
    )
    permutation_samples: int = Field(
        10_000, ge=100, description="sign flips for the paired permutation test's p-value"
    )
    seed: int = Field(0, description="seed of the resampling: the interval is the same on every run")


class BaselineParams(Section):
    """TF-IDF + logistic regression, C tuned on the validation split."""

    word_ngrams: list[int] = Field(
        default_factory=lambda: [1, 2], min_length=2, max_length=2,
        description="[low, high]: lengths of the word n-grams among the TF-IDF features",
    )
    char_ngrams: list[int] = Field(
        default_factory=lambda: [2, 5], min_length=2, max_length=2,
        description="[low, high]: lengths of the character n-grams (inside word boundaries)",
    )
    min_df: int = Field(1, ge=1, description="n-grams in fewer train texts than this are dropped")
    c_values: list[float] = Field(
        default_factory=lambda: [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0], min_length=1,
        description="inverse regularisation strengths tried; the best on the validation split is kept",
    )
    max_iter: int = Field(1000, ge=10, description="solver iterations per logistic-regression fit")

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
    dpi: int = Field(120, ge=30, le=600, description="resolution of the PNG figures")


class PipelineParams(Section):
    """What every task's params share: a language model pretrained with `model`, `pretrain` and `train`, which the
    pretrain stage reads from either task's params file. Each task's class declares the fields (`model`,
    `pretrain`, `train` among them), in its own order: the order of its params.yaml and of its README table."""

    @property
    def causal_attention(self) -> bool:
        """`model.attention` resolved: `auto` follows `pretrain.objective`."""
        if self.model.attention == "auto":
            return self.pretrain.objective == "clm"
        return self.model.attention == "causal"

    @model_validator(mode="after")
    def _check_objective_fits_model(self) -> "PipelineParams":
        """Refuse combinations that would train something other than what the keys say."""
        objective, attention = self.pretrain.objective, self.model.attention
        if objective == "clm" and attention == "bidirectional":
            raise ValueError("model.attention: bidirectional lets every position see the token it must predict "
                             "under pretrain.objective: clm (next-token prediction); use causal or auto, or "
                             "pretrain.objective: mlm")
        if objective == "mlm" and attention == "causal":
            raise ValueError("model.attention: causal hides the right context that pretrain.objective: mlm "
                             "predicts masked tokens from; use bidirectional or auto, or pretrain.objective: clm")
        if self.pretrain.nsp and objective != "mlm":
            raise ValueError("pretrain.nsp: true needs pretrain.objective: mlm (next-sentence prediction is "
                             "BERT's second task)")
        if self.pretrain.nsp and self.pretrain.seq_len < 8:
            raise ValueError(f"pretrain.nsp: a sentence pair needs pretrain.seq_len >= 8, got {self.pretrain.seq_len}")
        return self

    def sections(self, *names: str) -> dict[str, dict[str, Any]]:
        """The named sections as plain dicts (what a stage declares and logs)."""
        return {name: getattr(self, name).model_dump() for name in names}


class Params(PipelineParams):
    """The classification task's params.yaml."""

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
    def _check_pooling_fits_attention(self) -> "Params":
        objective, pooling = self.pretrain.objective, self.finetune.pooling
        if self.causal_attention and pooling == "first":
            raise ValueError(f"finetune.pooling: first reads position 0, which a causal model "
                             f"(pretrain.objective: {objective}) lets see only itself; use last or mean")
        if not self.causal_attention and pooling == "last":
            raise ValueError(f"finetune.pooling: last suits a causal model, where only the last token has seen the "
                             f"whole text; with bidirectional attention (pretrain.objective: {objective}) use "
                             "first (BERT's [CLS]) or mean")
        return self

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


TASKS = ("classification", "translation")


def parse_section_model(model: type[Section], raw: Any, origin: str) -> Any:
    """`raw` validated as `model`; every problem in one message, each naming its key."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = "\n  ".join(_describe(e) for e in exc.errors())
        raise ConfigError(f"{origin}: invalid parameters:\n  {problems}") from None


def split_task(raw: Any, origin: str) -> tuple[str, dict]:
    """The file's top-level `task` (absent: classification) and its sections."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping of sections, got {type(raw).__name__}")
    raw = dict(raw)
    task = raw.pop("task", "classification")
    if task not in TASKS:
        raise ConfigError(f"{origin}: task: must be one of {', '.join(TASKS)}, got {task!r}")
    return task, raw


def parse_params(raw: Any, origin: str = "params") -> Params:
    """The classification params (a translation file is read by `translation_config.load_task_params`)."""
    task, raw = split_task(raw, origin)
    if task != "classification":
        raise ConfigError(f"{origin}: task: {task}: these are the {task} pipeline's params (translation/params.yaml); "
                          "this stage belongs to the classification pipeline")
    return parse_section_model(Params, raw, origin)


def read_params_file(path: str | Path) -> Any:
    """The YAML of a params file, unvalidated; YAML 1.2 so `3e-4` is a float, not a string."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: parameter file not found")
    try:
        return YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate the classification pipeline's params file."""
    return parse_params(read_params_file(path), origin=str(path))
