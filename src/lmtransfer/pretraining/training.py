"""Language-model pretraining, one loop (`pretrain`): batches in a new order each epoch, one clipped AdamW step each,
a train-log row every `train.log_every` steps, validation every `pretrain.eval_every`, a resume snapshot every
`train.resume_every`. ULMFiT's adaptation to the task's texts (`adapt_to_task`) is the same loop, its own budget."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from lmtransfer.core.config import PretrainParams
from lmtransfer.harness.progress import progress_bar
from lmtransfer.modeling.model import IGNORE_INDEX, LanguageModel
from lmtransfer.modeling.runtime import autocast, compiled, to_device
from lmtransfer.pretraining.objectives import Objective
from lmtransfer.tokens.batches import PackedBatches
from lmtransfer.training import distributed
from lmtransfer.training.loop import RunOptions, optimizer_step
from lmtransfer.training.optim import make_optimizer, warmup_cosine

TASK_TEXTS = "the labeled train texts"  # what the adaptation phase trains on, in messages
PHASES = {"corpus": ("pretrain", "the corpus"), "task": ("adapt", TASK_TEXTS)}  # progress label, data in messages


@torch.no_grad()
def evaluate_lm(model: LanguageModel, batches, max_batches: int, device: torch.device) -> dict[str, float]:
    """Each of `model.losses` averaged over fixed validation batches: per scored token, or per pair (`nsp_*`)."""
    model.eval()
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for batch in batches.sequential(max_batches):
        batch = to_device(batch, device)
        with autocast(device):
            losses = model.losses(*batch)
        scored = int(batch[1].ne(IGNORE_INDEX).sum())
        for key, value in losses.items():
            weight = batch[0].size(0) if key.startswith("nsp") else scored
            sums[key] = sums.get(key, 0.0) + float(value) * weight
            counts[key] = counts.get(key, 0) + weight
    model.train()
    return {key: total / max(1, counts[key]) for key, total in sums.items()}


def validation_row(model: LanguageModel, valid_sets: tuple, max_batches: int, device: torch.device) -> dict:
    """val_loss and val_perplexity (of the next or the masked tokens), then the objective's extras."""
    windows, pairs = valid_sets
    scores = evaluate_lm(model, windows, max_batches, device)
    row = {"val_loss": scores["loss"], "val_perplexity": math.exp(min(scores["loss"], 50.0))}
    if "masked_accuracy" in scores:
        row["val_masked_accuracy"] = scores["masked_accuracy"]
    if pairs is not None:
        pair_scores = evaluate_lm(model, pairs, max_batches, device)
        row.update(val_nsp_loss=pair_scores["nsp_loss"], val_nsp_accuracy=pair_scores["nsp_accuracy"])
    return row


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


Phases = list[tuple[str, PretrainResult]]  # ("corpus", ...), then ("task", ...) when the LM adapted


def evaluate_imported(
    model: LanguageModel, train_ids: np.ndarray, valid_ids: np.ndarray, params: PretrainParams, device: torch.device,
    objective: Objective = Objective(),
) -> PretrainResult:
    """A loaded checkpoint's (`pretrain.init_from`) measurements at step 0, no training."""
    model.to(device)
    train_sets = objective.valid_batches(train_ids, params, 0, "the corpus's training part")
    valid_sets = objective.valid_batches(valid_ids, params, 0, "the corpus's validation part")
    train_loss = evaluate_lm(model, train_sets[0], params.eval_batches, device)["loss"]
    return PretrainResult(steps=0, train_log=[{"step": 0, "epoch": 0, "train_loss": train_loss, "lr": 0.0}],
                          valid_log=[{"step": 0, **validation_row(model, valid_sets, params.eval_batches, device)}])


def pretrain(model: LanguageModel, train_ids: np.ndarray, valid_ids: np.ndarray, params: PretrainParams,
             options: RunOptions = RunOptions(), objective: Objective = Objective(), phase: str = "corpus",
             first: int = 0) -> PretrainResult:
    """Train on `train_ids` for `pretrain.max_steps` steps (or `pretrain.epochs` passes), scored on `valid_ids`,
    logged from step `first` on; from the phase's snapshot if there is one (a finished phase's: its result)."""
    device, snapshots, (desc, data) = options.device, options.snapshots, PHASES[phase]
    batches = objective.train_batches(train_ids, params, options.seed, f"{data}'s training part")
    valid_sets = objective.valid_batches(valid_ids, params, options.seed, f"{data}'s validation part")
    model.to(device).train()
    steps = params.max_steps or params.epochs * batches.steps_per_epoch()
    optimizer = make_optimizer(model.parameters(), params.lr, params.weight_decay)
    scheduler = warmup_cosine(optimizer, params.warmup_steps, steps)
    step_losses = _step_function(model, objective, device, options.compile_steps)

    def validate(at: int) -> None:
        scores = validation_row(model, valid_sets, params.eval_batches, device)
        result.valid_log.append({"step": first + at, **scores})
        options.log_metrics(scores, first + at)

    saved = snapshots.load(phase, model, optimizer, scheduler) if snapshots else None
    if saved:  # where it was: steps done, the epoch, its batches done, the order before it drew, the window's sums
        result, (step, epoch, batch, order, sums) = PretrainResult(**saved["result"]), saved["at"]
        batches.generator.set_state(order)
        print(f"{desc}: resumed from the snapshot at step {step} of {steps}", flush=True)
    else:
        result = PretrainResult(steps=steps)
        step, epoch, batch, order, sums = 0, 0, 0, None, {}
        validate(0)
    started, window_started = time.perf_counter() - result.seconds, time.perf_counter()
    draws = distributed.Draws(options.seed)  # several processes: the data's draws shared, dropout each rank's
    while step < steps:
        if batch == 0:
            epoch += 1
            order = batches.generator.get_state()
        bar = progress_bar(total=min(batches.steps_per_epoch(), batch + steps - step), initial=batch,
                           desc=f"{desc} epoch {epoch}/{-(-steps // batches.steps_per_epoch())}", unit="batch")
        for inputs in draws.batches(itertools.islice(batches.epoch(skip=batch), steps - step)):
            inputs = to_device(inputs, device)
            loss, losses = step_losses(inputs)
            optimizer_step(loss, model, optimizer, scheduler, params.grad_clip)
            step, batch = step + 1, batch + 1
            sums = {key: sums.get(key, 0) + float(value) for key, value in {**losses, "tokens": inputs[0].numel(),
                                                                           "batches": 1}.items()}
            result.tokens_seen += inputs[0].numel()
            tokens_per_s = sums["tokens"] / max(time.perf_counter() - window_started, 1e-9)
            bar.update()
            bar.set_postfix(loss=f"{sums['loss'] / sums['batches']:.3f}", tok_s=f"{tokens_per_s:.0f}", refresh=False)
            if step % options.log_every == 0 or step == steps:
                row = _window_means(sums, epoch, scheduler.get_last_lr()[0])
                result.train_log.append({"step": first + step, **row})
                result.throughput.append({"step": first + step, "tokens_per_s": round(tokens_per_s, 1)})
                options.log_metrics({**row, "tokens_per_s": tokens_per_s}, first + step)
                sums, window_started = {}, time.perf_counter()
            if step % params.eval_every == 0 or step == steps:
                validate(step)
            if snapshots and (snapshots.due(step) or step == steps):  # the last: a kill before the outputs
                result.seconds = time.perf_counter() - started
                snapshots.save(phase, model, optimizer, scheduler, result=asdict(result),
                               at=(step, epoch, batch, order, sums))
        bar.close()
        batch = 0
    draws.close()
    result.seconds = time.perf_counter() - started
    return result


def _window_means(sums: dict[str, float], epoch: int, lr: float) -> dict[str, float]:
    """A train-log row: the logging window's mean losses (the objective's others as train_<name>)."""
    n = sums["batches"]
    return {"epoch": epoch, "train_loss": sums["loss"] / n, "lr": lr,
            **{f"train_{key}": total / n for key, total in sums.items() if key not in ("loss", "tokens", "batches")}}


def _step_function(model: LanguageModel, objective: Objective, device: torch.device, compile_steps: bool):
    """batch -> (the loss to backpropagate, the global batch's measurements). Each process weights its rows' losses
    by its share of the scored tokens (next-sentence scores: of the pairs): the all-reduced gradient is the batch's."""
    world = distributed.world()
    idle_head = getattr(model, "next_sentence", False) and not objective.next_sentence  # the adaptation phase
    trainer = compiled(distributed.wrap(model, type(model).losses, device, unused_parameters=idle_head), compile_steps)

    def step(batch: list[torch.Tensor]):
        rows, present = distributed.my_rows(batch, world)
        with autocast(device):
            losses = trainer(*rows)
        tokens = present * float(rows[1].ne(IGNORE_INDEX).sum()) / float(batch[1].ne(IGNORE_INDEX).sum())
        pairs = present * rows[0].size(0) / batch[0].size(0)
        shares = {key: pairs if key.startswith("nsp") else tokens for key in losses}
        if "nsp_loss" in losses:  # loss = masked_loss + nsp_loss: each part by its own share
            loss = losses["masked_loss"] * tokens + losses["nsp_loss"] * pairs
            shares.pop("loss")
        else:
            loss = losses["loss"] * tokens
        measured = distributed.sum_over_ranks({key: losses[key] * share for key, share in shares.items()})
        if "nsp_loss" in losses:
            measured = {"loss": measured["masked_loss"] + measured["nsp_loss"], **measured}
        return loss * world.size, measured  # DDP averages the ranks' gradients: x size makes it their sum

    return step


def adaptation_steps(adapt_epochs: int | float, steps_per_epoch: int) -> int:
    """Steps of the adaptation phase: whole passes, or a fraction of them (at least one step when it is on)."""
    if float(adapt_epochs).is_integer():
        return int(adapt_epochs) * steps_per_epoch
    return max(1, round(adapt_epochs * steps_per_epoch))


def adapt_to_task(
    model: LanguageModel, train_texts: np.ndarray, valid_texts: np.ndarray, params: PretrainParams,
    options: RunOptions = RunOptions(), objective: Objective = Objective(), first_step: int = 0,
) -> PretrainResult:
    """ULMFiT's second step: the LM trained on the task's train texts (labels unused), `pretrain.adapt_epochs` passes
    at `pretrain.adapt_lr`, warm-up over 10% of its steps, no next-sentence prediction (independent sentences)."""
    steps = adaptation_steps(params.adapt_epochs, PackedBatches(train_texts, params.seq_len, params.batch_size,
                                                                what=TASK_TEXTS).steps_per_epoch())
    whole = float(params.adapt_epochs).is_integer()  # whole passes run as before; a fraction stops at its steps
    if params.adapt_max_steps and steps > params.adapt_max_steps:
        print(f"adapt: {params.adapt_epochs:g} epochs of the task's texts would be {steps:,} steps; capped at "
              f"{params.adapt_max_steps:,} (pretrain.adapt_max_steps)")
        steps, whole = params.adapt_max_steps, False
    phase = params.model_copy(update={"epochs": math.ceil(params.adapt_epochs), "max_steps": 0 if whole else steps,
                                      "lr": params.adapt_lr, "warmup_steps": max(1, steps // 10)})
    return pretrain(model, train_texts, valid_texts, phase, replace(options, seed=options.seed + 1),
                    replace(objective, next_sentence=False), "task", first_step)

