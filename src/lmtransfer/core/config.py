"""Typed, validated parameters: one pydantic model per `params.yaml` section, no defaults (params.yaml is the one
source). A typo or an impossible value stops with one message naming the key; each `description` is the docs'."""

from __future__ import annotations

import codecs
import subprocess
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from lmtransfer.core.errors import ConfigError


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def path_list(value: Any) -> Any:
    """`-S data.corpus=big.txt` gives a string; a single path is a one-item list."""
    if isinstance(value, str):
        return [value] if value else []
    return value


def known_encoding(value: str) -> str:
    try:
        codecs.lookup(value)
    except LookupError:
        raise ValueError(f"unknown text encoding {value!r} (e.g. utf-8, utf-16, gb18030, latin-1)") from None
    return value


class TokenizerParams(Section):
    vocab_size: int = Field(
        ge=16, description="pieces of the sentencepiece model trained on the corpus, specials included "
        "(`<pad>` 0, `<unk>` 1, `<s>` 2, `</s>` 3, `<mask>` 4)")
    model_type: Literal["unigram", "bpe"] = Field(description="sentencepiece algorithm: `unigram` or `bpe`")
    character_coverage: float = Field(
        gt=0, le=1, description="share of the corpus's characters the pieces cover; the rarest others become "
        "`<unk>` (e.g. 0.9995 for Chinese)")
    normalization: Literal["nmt_nfkc_cf", "nmt_nfkc", "nfkc_cf", "nfkc", "identity"] = Field(
        description="sentencepiece's normalisation rule, applied to every text: `nmt_nfkc_cf` = NFKC + "
        "case folding; `nmt_nfkc` keeps case; also `nfkc_cf`, `nfkc`, `identity`")
    max_training_lines: int = Field(
        ge=1, description="at most this many corpus lines (sampled) train the sentencepiece model; "
        "fewer when they would pass ~64 MB of text (the trainer's memory grows with it)")
    model_file: str = Field(
        description="an existing sentencepiece `.model` to use instead of training one; it cuts raw text into "
        "pieces")
    vocab_file: str = Field(
        description="a fairseq dictionary (`<piece> <count>` per line) as the id space: 0 `<sos>`, 1 `<pad>`, "
        "2 `<eos>`, 3 `<oov>`, then its pieces in file order; raw text also needs `tokenizer.model_file`")


class PretrainParams(Section):
    epochs: int = Field(ge=1, description="passes over the corpus, when `pretrain.max_steps` is 0")
    max_steps: int = Field(
        ge=0, description="steps on the corpus; > 0 overrides `pretrain.epochs` (0 = `epochs` full passes)")
    batch_size: int = Field(ge=1, description="sequences per step")
    seq_len: int = Field(ge=2, description="tokens per sequence: the corpus is packed into windows this long")
    lr: float = Field(gt=0, description="peak AdamW learning rate: linear warm-up, then cosine decay to a tenth of it")
    warmup_steps: int = Field(ge=0, description="steps of linear learning-rate warm-up")
    weight_decay: float = Field(ge=0, description="AdamW weight decay")
    grad_clip: float = Field(gt=0, description="gradients are clipped to this global norm")
    eval_every: int = Field(ge=1, description="steps between validation loss and perplexity measurements")
    eval_batches: int = Field(ge=1, description="batches per validation measurement")
    prompts: list[str] = Field(
        description="continued greedily and by sampling after pretraining (`metrics/pretrain/seed<p>/samples.txt`)")
    generate_tokens: int = Field(ge=1, description="tokens generated per prompt")
    temperature: float = Field(gt=0, description="sampling temperature of the sampled continuations")
    top_k: int = Field(ge=0, description="sample among the k likeliest tokens (0 = all)")
    init_from: str = Field(
        description="a checkpoint to load instead of pretraining (ours or the original course layout; '' = "
        "pretrain here)")
    adapt_epochs: int | float = Field(
        ge=0, description="then epochs of LM training on the labeled train texts alone, labels unused (ULMFiT's "
        "second step; 0 = off; a fraction runs that share of the steps, as `lmtransfer scaling` does)")
    adapt_lr: float = Field(
        gt=0, description="peak learning rate of that phase (warm-up over the phase's first 10% of steps)")
    adapt_max_steps: int = Field(
        ge=0, description="at most this many steps of that phase, however large the labeled texts (the log "
        "says when it cuts; 0 = no cap)")
    objective: Literal["clm", "mlm"] = Field(
        description="`clm`: next-token prediction (causal attention); `mlm`: BERT's masked language "
        "modelling (bidirectional attention; prompts become fill-in-the-blank samples)")
    mask_prob: float = Field(
        gt=0, lt=1, description="`mlm`: share of each sequence's tokens chosen for prediction (of them 80% "
        "become `<mask>`, 10% a random token, 10% stay)")
    nsp: bool = Field(
        description="`mlm`: also next-sentence prediction (consecutive corpus lines vs random ones, 50/50; "
        "segment embeddings, a binary head on position 0); the adaptation phase stays MLM only")
    seeds: list[int] = Field(
        min_length=1,
        description="one pretraining run per seed (initial weights, batch order, samples), each fine-tuned with "
        "every `finetune.seeds`; a scratch run per pair too, its first seed drawing the random start")

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        return check_seeds(seeds, "pretrain.seeds")

    def ignored_settings(self, defaults: PretrainParams) -> list[str]:
        """Keys changed from `defaults` (the committed params.yaml's) that the others make useless."""
        changed = {name for name in type(self).model_fields if getattr(self, name) != getattr(defaults, name)}
        notes = []
        if "epochs" in changed and self.max_steps:
            notes.append(f"pretrain.epochs={self.epochs} has no effect: pretrain.max_steps={self.max_steps} sets the "
                         "corpus phase's length (pretrain.max_steps: 0 trains whole passes)")
        if self.objective == "clm":
            notes += [f"pretrain.{name}={getattr(self, name)} has no effect with pretrain.objective=clm (mlm only)"
                      for name in ("mask_prob", "nsp") if name in changed]
        if not self.adapt_epochs:
            notes += [f"pretrain.{name}={getattr(self, name)} has no effect: pretrain.adapt_epochs is 0"
                      for name in ("adapt_lr", "adapt_max_steps") if name in changed]
        if self.init_from:
            notes += [f"pretrain.{name}={getattr(self, name)} has no effect: pretrain.init_from loads the language "
                      "model instead of training it" for name in ("epochs", "max_steps", "lr", "warmup_steps")
                      if name in changed]
        return notes


def check_seeds(seeds: list[int], key: str = "finetune.seeds") -> list[int]:
    """Seeds name stages (`finetune_scratch@2`) and files: distinct and non-negative."""
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{key} has a repeated seed: {seeds}")
    if any(seed < 0 for seed in seeds):
        raise ValueError(f"{key} must be non-negative integers: {seeds}")
    return seeds


class TrainParams(Section):
    device: Literal["auto", "cpu", "cuda", "mps"] = Field(
        description="`auto` = CUDA, else MPS, else CPU; or `cpu`, `cuda`, `mps`; bf16 autocast on capable GPUs")
    num_threads: int = Field(
        ge=0, description="CPU threads (0 = all cores); the count changes the last digits of the results")
    nproc: int = Field(
        ge=1, description="processes that train together under torchrun (DDP: gloo on CPU, NCCL on GPUs), each "
        "on its share of every batch; same results within float rounding with `model.dropout: 0` "
        "(docs/guide/scale.md)")
    log_every: int = Field(ge=1, description="pretraining steps between logged training metrics")
    compile: bool = Field(
        description="`torch.compile` the training steps (fused kernels, meant for GPUs; measured slower on a "
        "2-core CPU, docs/guide/scale.md); the last digits of results differ")
    resume_every: int = Field(
        ge=0, description="pretraining steps between resume snapshots in `.resume/` (fine-tuning: every epoch); "
        "`dvc repro` after a kill continues from the last one with the same result; 0 = none. "
        "Not a DVC dependency: it never changes a result")


class PlotParams(Section):
    dpi: int = Field(ge=30, le=600, description="resolution of the PNG figures")


class PipelineParams(Section):
    """What every task's params share: a language model pretrained with `model`, `pretrain` and `train`."""

    @property
    def causal_attention(self) -> bool:
        """`model.attention` resolved: `auto` follows `pretrain.objective`."""
        if self.model.attention == "auto":
            return self.pretrain.objective == "clm"
        return self.model.attention == "causal"

    @model_validator(mode="after")
    def _check_objective_fits_model(self) -> PipelineParams:
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


def pooling_mismatch(pooling: str, causal: bool, objective: str) -> str | None:
    """Why `finetune.pooling` cannot read the whole text with this attention (None when it can)."""
    if causal and pooling == "first":
        return (f"finetune.pooling: first reads position 0, which a causal model (pretrain.objective: {objective}) "
                "lets see only itself; use last or mean")
    if not causal and pooling == "last":
        return ("finetune.pooling: last suits a causal model, where only the last token has seen the whole text; "
                f"with bidirectional attention (pretrain.objective: {objective}) use first (BERT's [CLS]) or mean")
    return None


def _describe(error: dict) -> str:
    key = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        return f"{key}: unknown parameter (check the spelling; see params.yaml in the repository for the known keys)"
    return message if not key or message.startswith(key) else f"{key}: {message}"


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
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping of sections, got {type(raw).__name__}")
    raw = dict(raw)
    task = raw.pop("task", "classification")
    if task not in TASKS:
        raise ConfigError(f"{origin}: task: must be one of {', '.join(TASKS)}, got {task!r}")
    return task, raw


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


def committed_version(path: str | Path) -> Any:
    """The params file's YAML at HEAD (None without one): `dvc exp run -S` edits the file itself."""
    try:
        text = subprocess.run(["git", "show", f"HEAD:./{Path(path).as_posix()}"], capture_output=True, text=True,
                              check=True).stdout
        return YAML(typ="safe", pure=True).load(text)
    except (OSError, subprocess.CalledProcessError, YAMLError):
        return None
