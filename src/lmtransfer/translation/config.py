"""Typed, validated `translation/params.yaml`: the language-model sections are `core.config`'s (the same pretraining
code runs for either task); data, fine-tuning and evaluation are translation's."""

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
    known_encoding,
    parse_section_model,
    path_list,
    read_params_file,
    split_task,
)
from lmtransfer.core.errors import ConfigError
from lmtransfer.modeling.model import ModelParams

PAIR_FORMATS = ("auto", "csv", "tsv", "jsonl")


class TranslationDataParams(Section):
    source: Literal["bible-en-fr", "files"] = Field(description="`bible-en-fr` (built in: World English Bible → Louis "
        "Segond 1910, verse pairs) or `files` (your own pairs: `data.train` and below)")
    valid_fraction: float = Field(gt=0, lt=1, description="bible-en-fr: share of whole chapters held out for "
        "validation; files: share of train rows carved out when `data.valid` is `''`")
    test_fraction: float = Field(gt=0, lt=1, description="the same for the test split (`data.test`)")
    seed: int = Field(description="seed of the chapter (or row) split")
    extra_monolingual: bool = Field(description="bible-en-fr: four more Bibles (KJV, Basic English, Ostervald, Darby), "
        "train chapters only, join the pretraining corpus")
    max_train_pairs: int = Field(ge=0, description="cap on training pairs, the first N after the split (0 = all)")
    clause_pairs: bool = Field(description="training pairs whose two sides split at clause punctuation into as many "
        "pieces are also added piece by piece (`data/clauses.py`): short pairs for a model asked to translate short "
        "sentences")
    train: str = Field(description="`files` only: the pairs file (`.tsv`, `.csv`, `.jsonl`); paths are relative to the "
        "repository root")
    valid: str = Field(description="`files` only: validation pairs; `''` = carved from train")
    test: str = Field(description="`files` only: test pairs; `''` = carved from train")
    format: Literal[PAIR_FORMATS] = Field(  # type: ignore[valid-type]
        description="of the pair files: `auto` (from the extension), `csv`, `tsv` or `jsonl`")
    source_column: str = Field(description="column (JSONL: field) holding the sentence to translate")
    target_column: str = Field(description="column (JSONL: field) holding its translation")
    corpus: list[str] = Field(description="`files` only: more unlabelled text of either language for pretraining, "
        "files or globs, one sentence per line")
    encoding: str = Field(description="text encoding of the pair and corpus files")

    _one_path_is_a_list = field_validator("corpus", mode="before")(path_list)
    _known_encoding = field_validator("encoding")(known_encoding)

    @model_validator(mode="after")
    def _files_need_train(self) -> TranslationDataParams:
        if self.source == "files" and not self.train:
            raise ValueError("data.source: files needs data.train (a TSV, CSV or JSONL file of sentence pairs)")
        if self.source != "files":
            given = [key for key in ("train", "valid", "test", "corpus") if getattr(self, key)]
            if given:
                raise ValueError(f"data.{given[0]} is read only with data.source: files (it is {self.source})")
        return self


class TranslationFinetuneParams(Section):
    seeds: list[int] = Field(min_length=1, description="fine-tunes per pretraining run (cross-attention init, batch "
        "order), and scratch runs per random start")
    epochs: int = Field(ge=1, description="passes over the training pairs; the epoch with the best validation BLEU is "
        "kept")
    max_steps: int = Field(ge=0, description="stop after this many steps, the learning-rate schedule sized to them (0 "
        "= run `epochs` full passes): a time budget that still sees pairs of every length")
    batch_size: int = Field(ge=1, description="sentence pairs per step (batched by length)")
    lr: float = Field(gt=0, description="peak AdamW learning rate: linear warm-up, then cosine decay to a tenth of it")
    warmup_steps: int = Field(ge=0, description="steps of linear learning-rate warm-up")
    weight_decay: float = Field(ge=0, description="AdamW weight decay")
    grad_clip: float = Field(gt=0, description="gradients are clipped to this global norm")
    label_smoothing: float = Field(ge=0, lt=1, description="the paper's label smoothing of the target distribution")
    max_len: int = Field(ge=4, description="tokens per side, BOS/EOS included: longer training pairs are left out "
        "(counted), not cut, so no target learns a wrong ending")
    tie_output: bool = Field(description="the output projection is the shared embedding (the paper); false: its own "
        "matrix, warm-started from the language model's head")
    valid_sentences: int = Field(ge=1, description="validation pairs translated greedily after each epoch for the "
        "validation BLEU")
    examples: list[str] = Field(description="sentences translated after each epoch (printed, and logged to MLflow as "
        "`examples/epoch<N>.txt`), so you see the model learn")

    _distinct_seeds = field_validator("seeds")(check_seeds)


class TranslationEvaluateParams(Section):
    beam_size: int = Field(ge=1, description="beam width of the test translations (1 = greedy decoding)")
    length_penalty: float = Field(ge=0, description="GNMT's alpha: beams are ranked by log P / ((5 + length) / 6) ** "
        "alpha (0 = raw log-probability, which favours short outputs)")
    max_length_ratio: float = Field(gt=0, description="a translation stops at `max_length_ratio` x its source's tokens "
        "+ `max_length_extra` tokens if it has not ended")
    max_length_extra: int = Field(ge=1, description="see `evaluate.max_length_ratio`")
    batch_size: int = Field(ge=1, description="test sentences decoded together")
    lab_sentences: str = Field(description="short sentences of the lab's kind (a TSV with `source` and `target` "
        "columns, relative to translation/) that every model translates for the results page; '' = none")
    bootstrap_samples: int = Field(ge=100, description="resamples of the runs and the test sentences (paired across "
        "variants) for the 95% intervals")
    seed: int = Field(description="seed of the resampling: the intervals are the same on every run")


class TranslationParams(PipelineParams):
    """`translation/params.yaml`: English→French (or your pairs), pretrained vs scratch."""

    data: TranslationDataParams
    tokenizer: TokenizerParams
    model: ModelParams
    pretrain: PretrainParams
    finetune: TranslationFinetuneParams
    train: TrainParams
    evaluate: TranslationEvaluateParams
    plot: PlotParams

    @model_validator(mode="after")
    def _check_translation(self) -> TranslationParams:
        if self.pretrain.adapt_epochs:
            raise ValueError("pretrain.adapt_epochs: must be 0 for translation (the sentence pairs already join the "
                             "pretraining corpus)")
        if self.tokenizer.vocab_file:
            raise ValueError("tokenizer.vocab_file: translation needs one sentencepiece model over both languages "
                             "(tokenizer.model_file, or '' to train one)")
        return self


def load_translation_params(path: str | Path = "params.yaml") -> TranslationParams:
    return parse_translation_params(read_params_file(path), str(path))


def parse_translation_params(raw: Any, origin: str = "params") -> TranslationParams:
    """`raw` validated as translation's params; another task's file is refused with what to do."""
    task, sections = split_task(raw, origin)
    if task != "translation":
        raise ConfigError(f"{origin}: task: {task}: this stage belongs to the translation pipeline, whose params "
                          "file says `task: translation` (run it with `dvc repro translation/dvc.yaml`)")
    return parse_section_model(TranslationParams, sections, origin)
