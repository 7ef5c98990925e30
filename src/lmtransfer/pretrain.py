"""Language-model pretraining: next-token prediction on packed sequences (`datasets.PackedBatches`).

The loop reads top to bottom: batches, loss, one clipped AdamW step, logging every
`log_every` steps, validation every `eval_every` steps. A second phase (ULMFiT's
adaptation to the task's texts) is the same loop with its own schedule.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .config import PretrainParams
from .datasets import PackedBatches
from .model import LanguageModel
from .optim import make_optimizer, optimizer_step, warmup_cosine
from .progress import progress_bar
from .runtime import autocast

MetricsLogger = Callable[[dict[str, float], int], None]
TASK_TEXTS = "the labeled train texts"  # what the adaptation phase trains on, in messages


def _no_log(metrics: dict[str, float], step: int) -> None:
    pass


@torch.no_grad()
def evaluate_lm(model: LanguageModel, batches: PackedBatches, max_batches: int, device: torch.device) -> float:
    """Mean next-token cross-entropy over fixed validation windows."""
    model.eval()
    total, count = 0.0, 0
    for inputs, targets in batches.sequential(max_batches):
        with autocast(device):
            loss = model.loss(inputs.to(device), targets.to(device))
        total += float(loss) * targets.numel()
        count += targets.numel()
    model.train()
    return total / max(1, count)


@dataclass
class PretrainResult:
    steps: int
    train_log: list[dict] = field(default_factory=list)  # step, epoch, train_loss, lr
    throughput: list[dict] = field(default_factory=list)  # step, tokens_per_s: timings, kept apart from results
    valid_log: list[dict] = field(default_factory=list)  # step, val_loss, val_perplexity
    tokens_seen: int = 0
    seconds: float = 0.0

    @property
    def final_val_loss(self) -> float:
        return self.valid_log[-1]["val_loss"]


def evaluate_imported(
    model: LanguageModel, train_ids: np.ndarray, valid_ids: np.ndarray, params: PretrainParams, device: torch.device
) -> PretrainResult:
    """For a loaded checkpoint (`pretrain.init_from`): no training, the same loss measurements at step 0."""
    model.to(device)
    train_batches = PackedBatches(train_ids, params.seq_len, params.batch_size, what="the corpus's training part")
    valid_batches = PackedBatches(valid_ids, params.seq_len, params.batch_size, what="the corpus's validation part")
    train_loss = evaluate_lm(model, train_batches, params.eval_batches, device)
    val_loss = evaluate_lm(model, valid_batches, params.eval_batches, device)
    return PretrainResult(
        steps=0,
        train_log=[{"step": 0, "epoch": 0, "train_loss": train_loss, "lr": 0.0}],
        valid_log=[{"step": 0, "val_loss": val_loss, "val_perplexity": math.exp(min(val_loss, 50.0))}],
    )


def total_steps(params: PretrainParams, batches: PackedBatches) -> int:
    return params.max_steps or params.epochs * batches.steps_per_epoch()


def pretrain(
    model: LanguageModel,
    train_ids: np.ndarray,
    valid_ids: np.ndarray,
    params: PretrainParams,
    device: torch.device,
    seed: int = 0,
    log_every: int = 50,
    log_metrics: MetricsLogger = _no_log,
    first_step: int = 0,
    desc: str = "pretrain",
    data_name: str = "the corpus",
) -> PretrainResult:
    """Next-token training; logged steps count from `first_step` (a second phase continues the first's curve)."""
    train_batches = PackedBatches(train_ids, params.seq_len, params.batch_size, seed, f"{data_name}'s training part")
    valid_batches = PackedBatches(valid_ids, params.seq_len, params.batch_size, seed, f"{data_name}'s validation part")
    steps = total_steps(params, train_batches)
    model.to(device).train()
    optimizer = make_optimizer(model.parameters(), params.lr, params.weight_decay)
    scheduler = warmup_cosine(optimizer, params.warmup_steps, steps)
    result = PretrainResult(steps=steps)

    def validate(step: int) -> None:
        val_loss = evaluate_lm(model, valid_batches, params.eval_batches, device)
        row = {"step": first_step + step, "val_loss": val_loss, "val_perplexity": math.exp(min(val_loss, 50.0))}
        result.valid_log.append(row)
        log_metrics({"val_loss": val_loss, "val_perplexity": row["val_perplexity"]}, first_step + step)

    validate(0)
    start = window_start = time.perf_counter()
    window_loss, window_batches, window_tokens = 0.0, 0, 0
    step, epoch = 0, 0
    progress = progress_bar(total=steps, desc=desc, unit="step")
    while step < steps:
        epoch += 1
        for inputs, targets in train_batches.epoch():
            inputs, targets = inputs.to(device), targets.to(device)
            with autocast(device):
                loss = model.loss(inputs, targets)
            optimizer_step(loss, model, optimizer, scheduler, params.grad_clip)
            step += 1
            window_loss += loss.item()
            window_batches += 1
            window_tokens += targets.numel()
            result.tokens_seen += targets.numel()
            if step % log_every == 0 or step == steps:
                elapsed = time.perf_counter() - window_start
                row = {
                    "step": first_step + step,
                    "epoch": epoch,
                    "train_loss": window_loss / window_batches,
                    "lr": scheduler.get_last_lr()[0],
                }
                tokens_per_s = window_tokens / max(elapsed, 1e-9)
                result.train_log.append(row)
                result.throughput.append({"step": first_step + step, "tokens_per_s": round(tokens_per_s, 1)})
                log_metrics({**{k: v for k, v in row.items() if k != "step"}, "tokens_per_s": tokens_per_s},
                            first_step + step)
                progress.set_postfix(loss=f"{row['train_loss']:.3f}", tok_s=f"{tokens_per_s:.0f}", refresh=False)
                window_loss, window_batches, window_tokens = 0.0, 0, 0
                window_start = time.perf_counter()
            if step % params.eval_every == 0 and step != steps:
                validate(step)
            progress.update(1)
            if step >= steps:
                break
    progress.close()
    validate(step)
    result.seconds = time.perf_counter() - start
    return result


def adapt_to_task(
    model: LanguageModel,
    train_texts: np.ndarray,
    valid_texts: np.ndarray,
    params: PretrainParams,
    device: torch.device,
    seed: int = 0,
    log_every: int = 50,
    log_metrics: MetricsLogger = _no_log,
    first_step: int = 0,
) -> PretrainResult:
    """ULMFiT's second step: keep training the LM on the task's own (train) texts, labels unused.

    The general corpus teaches language; this phase teaches the kind of text the classifier will read.
    `pretrain.adapt_epochs` passes at `pretrain.adapt_lr`, warm-up over the first 10% of its steps.
    """
    steps = params.adapt_epochs * PackedBatches(train_texts, params.seq_len, params.batch_size,
                                                what=TASK_TEXTS).steps_per_epoch()
    phase = params.model_copy(update={"epochs": params.adapt_epochs, "max_steps": 0, "lr": params.adapt_lr,
                                      "warmup_steps": max(1, steps // 10)})
    return pretrain(model, train_texts, valid_texts, phase, device, seed + 1, log_every, log_metrics,
                    first_step=first_step, desc="adapt", data_name=TASK_TEXTS)
