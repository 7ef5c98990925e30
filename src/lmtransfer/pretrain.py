"""Language-model pretraining: next-token prediction on packed sequences.

Documents are concatenated (each framed by BOS ... EOS) and cut into windows of
`seq_len + 1` tokens, so no compute is spent on padding. Each epoch starts the
windows at a new random offset and visits them in a new random order.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import torch

from .config import PretrainParams
from .model import LanguageModel
from .optim import make_optimizer, optimizer_step, warmup_cosine
from .runtime import autocast, progress_bar

MetricsLogger = Callable[[dict[str, float], int], None]


def _no_log(metrics: dict[str, float], step: int) -> None:
    pass


class PackedBatches:
    """(inputs, targets) batches of shape (batch_size, seq_len) cut from one flat token array."""

    def __init__(self, ids: np.ndarray, seq_len: int, batch_size: int, seed: int = 0):
        if ids.size < seq_len + 1:
            raise ValueError(
                f"the corpus has {ids.size} tokens, fewer than pretrain.seq_len + 1 = {seq_len + 1}; "
                "lower pretrain.seq_len or add text"
            )
        self.ids = ids  # kept as stored (uint16, possibly memory-mapped): a huge corpus is never copied whole
        self.seq_len, self.batch_size = seq_len, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def windows(self, offset: int) -> int:
        return (self.ids.size - 1 - offset) // self.seq_len

    def steps_per_epoch(self) -> int:
        return max(1, math.ceil(self.windows(self.seq_len - 1) / self.batch_size))

    def epoch(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        offset = int(torch.randint(0, self.seq_len, (1,), generator=self.generator))
        n_windows = self.windows(offset)
        if n_windows == 0:
            offset, n_windows = 0, self.windows(0)
        starts = offset + torch.randperm(n_windows, generator=self.generator) * self.seq_len
        for begin in range(0, n_windows, self.batch_size):
            yield self._gather(starts[begin : begin + self.batch_size])

    def sequential(self, max_batches: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Fixed, ordered windows: the same validation batches every time."""
        starts = torch.arange(self.windows(0)) * self.seq_len
        for batch_index, begin in enumerate(range(0, len(starts), self.batch_size)):
            if batch_index >= max_batches:
                break
            yield self._gather(starts[begin : begin + self.batch_size])

    def _gather(self, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        index = starts.unsqueeze(1) + torch.arange(self.seq_len + 1)
        window = torch.from_numpy(np.asarray(self.ids[index.numpy()], dtype=np.int64))
        return window[:, :-1], window[:, 1:]


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
    train_loss = evaluate_lm(model, PackedBatches(train_ids, params.seq_len, params.batch_size), params.eval_batches, device)
    val_loss = evaluate_lm(model, PackedBatches(valid_ids, params.seq_len, params.batch_size), params.eval_batches, device)
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
) -> PretrainResult:
    """Next-token training; logged steps count from `first_step` (a second phase continues the first's curve)."""
    train_batches = PackedBatches(train_ids, params.seq_len, params.batch_size, seed)
    valid_batches = PackedBatches(valid_ids, params.seq_len, params.batch_size, seed)
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
    steps = params.adapt_epochs * PackedBatches(train_texts, params.seq_len, params.batch_size).steps_per_epoch()
    phase = params.model_copy(update={"epochs": params.adapt_epochs, "max_steps": 0, "lr": params.adapt_lr,
                                      "warmup_steps": max(1, steps // 10)})
    return pretrain(model, train_texts, valid_texts, phase, device, seed + 1, log_every, log_metrics,
                    first_step=first_step, desc="adapt")


def _encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Raw text when the tokenizer can cut it; with only a dictionary, the prompt is read as pieces."""
    from .tokenizer import TokenizerError

    try:
        return tokenizer.encode(prompt)
    except TokenizerError:
        return tokenizer.pieces_to_ids(prompt)


def generate_samples(
    model: LanguageModel, tokenizer, prompts: list[str], params: PretrainParams, device: torch.device, seed: int = 0
) -> list[dict[str, str]]:
    """Greedy and sampled continuations of fixed prompts: a visible check of what the LM learned."""
    model.eval()
    generator = torch.Generator(device=device).manual_seed(seed)
    samples = []
    for prompt in prompts:
        prompt_ids = torch.tensor([[tokenizer.bos_id, *_encode_prompt(tokenizer, prompt)]], device=device)
        for mode, temperature in (("greedy", 0.0), ("sampled", params.temperature)):
            out = model.generate(
                prompt_ids, params.generate_tokens, temperature, params.top_k, eos_id=tokenizer.eos_id, generator=generator
            )
            continuation = tokenizer.decode(out[0, prompt_ids.size(1) :].tolist())
            samples.append({"prompt": prompt, "mode": mode, "continuation": continuation})
    return samples
