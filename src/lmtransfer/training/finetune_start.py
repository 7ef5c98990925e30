"""Where a fine-tune stage starts and what it leaves, shared by both tasks (its command line:
`training.stage_args`).

dvc.yaml runs one fine-tune stage per variant and run; the stage's name (`finetune_pretrained@2-0`: pretraining
run 2, fine-tuning seed 0; the translation task's `finetune_pretrained@0` has one pretraining run) labels its log
lines and its MLflow run. Both tasks start the same way: the pretrained language model, or the same network, as
`model.*` describes it, with fresh weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lmtransfer.core.io import write_json, write_timings, write_tsv
from lmtransfer.core.paths import PretrainOutputs, finetune_epochs, finetune_run, finetune_summary, timings_file
from lmtransfer.harness.tracking import log_checkpoint, log_run, run_that_wrote, tag_checkpoint
from lmtransfer.modeling.checkpoint import load_checkpoint, model_config_of, model_params_of
from lmtransfer.modeling.model import ModelConfig
from lmtransfer.training.stage_args import FinetuneArgs


def draw_seed(seed: int, pretrain_seed: int | None) -> int:
    """The seed of every random draw of one fine-tune. With a pretraining seed, both variants' runs of the pair
    (P, N) draw from numpy's `SeedSequence([P, N])`: the scratch runs of different P start from different random
    weights, as the pretrained runs start from different pretraining runs."""
    if pretrain_seed is None:
        return seed
    return int(np.random.SeedSequence([pretrain_seed, seed]).generate_state(1)[0])


@dataclass(frozen=True)
class LanguageModelStart:
    """Where a fine-tune starts. `payload` is the pretrained checkpoint (None from scratch); `sections` the params
    its result depends on (a pretrained start carries `model.*` in the checkpoint); `upstream` the MLflow run that
    wrote the checkpoint (None from scratch)."""

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
        """`2-0` (pretraining run 2, fine-tuning seed 0), or the seed alone, or `2-0-n300` (trained on 300 labeled
        examples): the files' suffix."""
        run = finetune_run(self.seed, self.pretrain_seed)
        return run if self.labels is None else f"{run}-n{self.labels}"

    @property
    def stage(self) -> str:
        return FinetuneArgs(self.variant, self.seed, self.pretrain_seed, self.labels).stage  # the one place it is made

    @property
    def draws(self) -> int:
        """What seeds this fine-tune's random draws (`draw_seed`)."""
        return draw_seed(self.seed, self.pretrain_seed)

    def logged_params(self, params: Any) -> dict[str, dict[str, Any]]:
        """The params this fine-tune's MLflow run records: the sections it reads, and for a pretrained start the
        `model.*` its checkpoint was built with (it declares none: its shape is the checkpoint's, not
        params.yaml's), so MLflow's Compare view lines it up with its scratch twin."""
        logged = params.sections(*self.sections)
        if self.payload is not None:
            logged["model"] = model_params_of(self.config)
        return logged


def language_model_start(params: Any, meta: dict, args: FinetuneArgs) -> LanguageModelStart:
    """This stage's start: the pretraining run's checkpoint for `--init pretrained` (`models/pretrained/seed<P>.pt`,
    or `models/pretrained.pt` without `--pretrain-seed`); for `--init scratch` the network `params.model` describes
    over the tokenizer's ids (`meta`: data/tokenized's meta.json), fresh."""
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
    """What every fine-tune stage leaves beside its checkpoint: the curve per epoch (a DVC plot), the summary (a
    DVC-cached output), the wall-clock timings (kept out of the results), and all of it on the stage's run, with
    the checkpoint as the run's file, or as the MLflow model `log_model` makes of it (the file inside it)."""
    write_tsv(finetune_epochs(start.variant, start.run), history)
    write_json(finetune_summary(start.variant, start.run), summary)
    write_timings(timings_file(start.stage), timings)
    log_run(metrics={**summary, **timings})
    if log_model is None:
        log_checkpoint(checkpoint)
    else:
        tag_checkpoint(checkpoint)
        log_model(checkpoint)
