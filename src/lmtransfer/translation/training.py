"""Fine-tuning the encoder–decoder on sentence pairs: one code path for the warm-started and the scratch model.

Per epoch: length-bucketed batches of pairs (`translation_data.pair_batches`), one
clipped AdamW step each on the label-smoothed cross-entropy of the next target
token; then the validation loss (teacher forcing, every validation pair), the
validation BLEU (greedy translations of the first `finetune.valid_sentences`
pairs) and the example sentences translated, so a user sees the model learn.
The epoch with the best validation BLEU is kept.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from lmtransfer.modeling.model import ModelConfig, count_parameters
from lmtransfer.modeling.runtime import autocast, to_device
from lmtransfer.tokens.tokenizer import Tokenizer
from lmtransfer.training.loop import NumpyBatchOrder, Position, RunOptions, Schedule
from lmtransfer.training.loop import train as train_loop
from lmtransfer.training.optim import make_optimizer, warmup_cosine
from lmtransfer.translation.batches import PairSplit, pair_batches, steps_per_epoch, trainable_pairs
from lmtransfer.translation.bleu import corpus_scores
from lmtransfer.translation.config import TranslationFinetuneParams
from lmtransfer.translation.decoding import evaluation_mode
from lmtransfer.translation.model import TranslationConfig, TranslationModel, WarmStart, warm_start_from_language_model
from lmtransfer.translation.translator import DecodingOptions, translate_sources, translate_texts


@dataclass
class TranslationResult:
    history: list[dict[str, float]] = field(default_factory=list)
    examples: list[list[str]] = field(default_factory=list)  # per epoch, the translations of finetune.examples
    best_epoch: int = 0
    best_val_bleu: float = -1.0
    best_state: dict | None = None
    left_out: int = 0  # training pairs longer than finetune.max_len on a side
    tokens: int = 0  # read on both sides, for tokens per second
    seconds: float = 0.0
    tokens_per_second: float = 0.0


def build_translation_model(lm_config: ModelConfig, params: TranslationFinetuneParams, seed: int,
                            lm_state: dict[str, torch.Tensor] | None) -> tuple[TranslationModel, WarmStart | None]:
    """The encoder–decoder shaped after the pretrained LM (its layers on both sides), from the same seeded random
    init in both variants; with `lm_state`, its tensors are then copied in (cross-attention stays fresh)."""
    config = TranslationConfig.from_language_model(lm_config, tie_output=params.tie_output)
    torch.manual_seed(seed)
    model = TranslationModel(config)
    warm = warm_start_from_language_model(model, lm_state, lm_config) if lm_state is not None else None
    return model, warm


@torch.no_grad()
def validation_loss(model: TranslationModel, split: PairSplit, batch_size: int, device: torch.device) -> float:
    """Mean cross-entropy per target token (no label smoothing) over every validation pair, teacher-forced."""
    total, tokens = 0.0, 0
    indices = np.arange(len(split))
    with evaluation_mode(model):
        for source, target_in, target_out in pair_batches(split, indices, batch_size, model.config.pad_id,
                                                          np.random.default_rng(0)):
            source, target_in, target_out = to_device((source, target_in, target_out), device)
            with autocast(device):
                logits = model(source, target_in).float()
            count = int(target_out.ne(model.config.pad_id).sum())
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), target_out.reshape(-1),
                                                     ignore_index=model.config.pad_id, reduction="sum")
            total, tokens = total + float(loss), tokens + count
    return total / max(tokens, 1)


@dataclass(frozen=True)
class TranslationPairs:
    """What a translation fine-tune reads: the pairs, the validation references as text, the tokenizer."""

    train: PairSplit
    valid: PairSplit
    valid_references: list[str]
    tokenizer: Tokenizer


class _Translation(NumpyBatchOrder):
    """Translation fine-tuning as a task of the training loop (`training.loop.Task`): batches of pairs, the
    label-smoothed loss of the next target token; at each epoch's end the validation loss, BLEU and examples,
    the best epoch's weights kept."""

    def __init__(self, model: TranslationModel, pairs: TranslationPairs, params: TranslationFinetuneParams,
                 options: RunOptions):
        self.model, self.train, self.valid, self.tokenizer = model, pairs.train, pairs.valid, pairs.tokenizer
        self.usable = trainable_pairs(pairs.train, params.max_len)
        self.params, self.device, self.on_epoch, self.desc = params, options.device, options.on_epoch, options.desc
        self.result = TranslationResult(left_out=len(pairs.train) - len(self.usable))
        self.pad, self.grad_clip = model.config.pad_id, params.grad_clip
        self.optimizer = make_optimizer(model.parameters(), params.lr, params.weight_decay)
        self.steps_per_epoch = steps_per_epoch(len(self.usable), params.batch_size)
        self.total_steps = self.steps_per_epoch * params.epochs
        if params.max_steps:
            self.total_steps = min(self.total_steps, params.max_steps)
        self.scheduler = warmup_cosine(self.optimizer, params.warmup_steps, self.total_steps)
        self.generator = np.random.default_rng(options.seed)  # draws each epoch's order
        self.greedy = DecodingOptions(beam_size=1, batch_size=params.batch_size)
        self.n_valid = min(params.valid_sentences, len(pairs.valid))
        self.valid_sources = [pairs.valid.source(i) for i in range(self.n_valid)]
        self.valid_references = pairs.valid_references[:self.n_valid]
        self.train_loss = 0.0

    def epoch_batches(self, skip: int):
        self.model.train()
        batches = pair_batches(self.train, self.usable, self.params.batch_size, self.pad, self.generator)
        return itertools.islice(batches, skip, None)

    def step(self, batch: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast(self.device):
            loss = self.model.loss(*batch, self.params.label_smoothing)
        return loss, loss

    def tally(self, batch: list[torch.Tensor], loss: torch.Tensor) -> dict[str, float]:
        """The loss summed over target tokens; the tokens read on both sides (tokens per second)."""
        source, _, target_out = batch
        count = int(target_out.ne(self.pad).sum())
        self.result.tokens += int(source.ne(self.pad).sum()) + count
        return {"loss": loss.item() * count, "seen": count}

    def postfix(self, at: Position) -> dict[str, str]:
        return {"loss": f"{at.sums['loss'] / at.sums['seen']:.3f}"}

    def report(self, at: Position) -> None:
        self.train_loss = at.sums.get("loss", 0.0) / max(at.sums.get("seen", 0.0), 1)

    def validate(self, at: Position) -> None:
        """The epoch's row: its training loss, the validation loss and greedy BLEU; the examples translated."""
        result, params, epoch = self.result, self.params, at.epoch
        hypotheses = translate_sources(self.model, self.valid_sources, self.tokenizer, self.greedy, self.device)
        row = {"epoch": epoch, "train_loss": self.train_loss,
               "val_loss": validation_loss(self.model, self.valid, params.batch_size, self.device),
               "val_bleu": float(corpus_scores(hypotheses, self.valid_references)["bleu"])}
        examples = (translate_texts(self.model, params.examples, self.tokenizer, self.greedy, self.device)
                    if params.examples else [])
        result.history.append(row)
        result.examples.append(examples)
        if row["val_bleu"] > result.best_val_bleu:
            result.best_val_bleu, result.best_epoch = row["val_bleu"], epoch
            result.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in self.model.state_dict().items()})
        print(f"{self.desc} epoch {epoch}: train loss {row['train_loss']:.4f} | val loss {row['val_loss']:.4f} "
              f"BLEU {row['val_bleu']:.2f} (greedy, {self.n_valid} pairs)", flush=True)
        for text, translation in zip(params.examples, examples):
            print(f"    {text} -> {translation}", flush=True)
        if self.on_epoch:
            self.on_epoch(row, examples)

    def results(self) -> dict:
        return asdict(self.result)

    def restore(self, results: dict, log_again: bool) -> None:
        self.result = TranslationResult(**results)
        if self.on_epoch and log_again:
            for row, examples in zip(self.result.history, self.result.examples):
                self.on_epoch(row, examples)


def finetune_translation(model: TranslationModel, pairs: TranslationPairs, params: TranslationFinetuneParams,
                         options: RunOptions = RunOptions(desc="finetune")) -> TranslationResult:
    """Train `params.epochs` epochs (or `params.max_steps` steps) on the training loop (`training.loop`);
    `options.on_epoch(row, example_translations)` after each epoch (MLflow logging). With `options.snapshots`,
    save after each epoch and resume from the last one saved (its epochs are passed to `on_epoch` again)."""
    model.to(options.device)
    task = _Translation(model, pairs, params, options)
    torch.manual_seed(options.seed)  # dropout
    steps, total_steps, result = task.steps_per_epoch, task.total_steps, task.result
    print(f"{options.desc}: {count_parameters(model):,} parameters, {len(task.usable):,} training pairs "
          f"({result.left_out:,} longer than finetune.max_len={params.max_len} left out), {steps} steps per epoch"
          + (f", {total_steps} in all (finetune.max_steps)" if total_steps < steps * params.epochs else ""),
          flush=True)
    ended = train_loop(task, Schedule(total_steps, steps), replace(options, snapshot="epochs"))
    task.result.seconds = ended.seconds
    task.result.tokens_per_second = task.result.tokens / max(ended.seconds, 1e-9)
    return task.result
