"""Where a fine-tune stage of either task starts (the pretrained LM, or `model.*` from scratch) and what it leaves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lmtransfer.core.io import write_json, write_timings, write_tsv
from lmtransfer.core.paths import PretrainOutputs, finetune_epochs, finetune_run, finetune_summary, timings_file
from lmtransfer.harness.tracking import log_checkpoint, log_run, run_that_wrote, tag_checkpoint
from lmtransfer.modeling.checkpoint import load_checkpoint, model_config_of
from lmtransfer.modeling.model import ModelConfig, ModelParams
from lmtransfer.training.stage_args import FinetuneArgs


def draw_seed(seed: int, pretrain_seed: int | None) -> int:
    """The seed of every draw of one fine-tune: with a pretraining seed P, `SeedSequence([P, N])`, so the scratch
    runs of different P start from different weights, as the pretrained runs do."""
    if pretrain_seed is None:
        return seed
    return int(np.random.SeedSequence([pretrain_seed, seed]).generate_state(1)[0])


@dataclass(frozen=True)
class LanguageModelStart:
    """`payload`: the pretrained checkpoint; `sections`: the params the result depends on (a pretrained start's
    `model.*` is in the checkpoint); `upstream`: the MLflow run that wrote the checkpoint (both None from scratch)."""

    variant: str
    seed: int
    config: ModelConfig  # of the language model the fine-tune starts from
    payload: dict | None
    sections: tuple[str, ...]
    upstream: str | None
    pretrain_seed: int | None = None
    pretrained: Path | None = None  # the checkpoint a pretrained start loaded
    labels: int | None = None  # the label curve's runs: the number of labeled examples

    @property
    def run(self) -> str:
        """The files' suffix: `2-0` (pretraining run 2, seed 0), the seed alone, or `2-0-n300` (300 labels)."""
        run = finetune_run(self.seed, self.pretrain_seed)
        return run if self.labels is None else f"{run}-n{self.labels}"

    @property
    def stage(self) -> str:
        return FinetuneArgs(self.variant, self.seed, self.pretrain_seed, self.labels).stage  # the one place it is made

    @property
    def draws(self) -> int:
        return draw_seed(self.seed, self.pretrain_seed)

    def logged_params(self, params: Any) -> dict[str, dict[str, Any]]:
        """The sections it reads; a pretrained start adds its network's `model.*`, to line up with its scratch twin."""
        logged = params.sections(*self.sections)
        if self.payload is not None:
            logged["model"] = {key: getattr(self.config, key) for key in ModelParams.model_fields}
        return logged


def language_model_start(params: Any, meta: dict, args: FinetuneArgs) -> LanguageModelStart:
    """`--init pretrained`: the pretraining run's checkpoint; `--init scratch`: `params.model` over the tokenizer's
    ids (`meta`: data/tokenized's meta.json), fresh."""
    if args.init == "pretrained":
        path = PretrainOutputs(args.pretrain_seed).checkpoint
        payload = load_checkpoint(path, expected_kind="language_model")
        return LanguageModelStart(args.init, args.seed, model_config_of(payload), payload, ("finetune", "train"),
                                  run_that_wrote(path), args.pretrain_seed, path, args.labels)
    config = ModelConfig.from_params(params.model, meta["vocab_size"], meta["pad_id"], params.causal_attention)
    return LanguageModelStart(args.init, args.seed, config, None, ("model", "finetune", "train"), None,
                              args.pretrain_seed, labels=args.labels)


def record_finetuned(start: LanguageModelStart, checkpoint: Path, history: list[dict], summary: dict,
                     timings: dict, log_model: Callable[[Path], object] | None = None) -> None:
    """Beside the checkpoint: the curve per epoch, the summary, the timings, and all of it on the stage's run, with
    the checkpoint as a file or as the MLflow model `log_model` makes of it."""
    write_tsv(finetune_epochs(start.variant, start.run), history)
    write_json(finetune_summary(start.variant, start.run), summary)
    write_timings(timings_file(start.stage), timings)
    log_run(metrics={**summary, **timings})
    if log_model is None:
        log_checkpoint(checkpoint)
    else:
        tag_checkpoint(checkpoint)
        log_model(checkpoint)
