"""Language-model pretraining: next-token or masked-token prediction (`objectives.Objective`).

A task of the one training loop (`training.loop`): packed windows (or sentence pairs), the objective's
losses, one clipped AdamW step each, a train-log row every `log_every` steps, a validation row every
`eval_every` steps. A second phase (ULMFiT's adaptation to the task's texts) is the same task with its own
schedule.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from lmtransfer.core.config import PretrainParams
from lmtransfer.modeling.model import IGNORE_INDEX, LanguageModel
from lmtransfer.modeling.runtime import autocast, compiled, to_device
from lmtransfer.pretraining.objectives import Objective
from lmtransfer.tokens.batches import PackedBatches
from lmtransfer.training import distributed
from lmtransfer.training.loop import Position, RunOptions, Schedule, train
from lmtransfer.training.optim import make_optimizer, warmup_cosine
from lmtransfer.training.resume import Snapshots

MetricsLogger = Callable[[dict[str, float], int], None]
TASK_TEXTS = "the labeled train texts"  # what the adaptation phase trains on, in messages


def _no_log(metrics: dict[str, float], step: int) -> None:
    pass


@torch.no_grad()
def evaluate_lm(model: LanguageModel, batches, max_batches: int, device: torch.device) -> dict[str, float]:
    """Each of `model.losses` averaged over fixed validation batches: per scored token (the loss, masked
    accuracy), per sentence pair (`nsp_*`)."""
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
    """val_loss and val_perplexity (of the next token, or of the masked tokens), then the objective's extras."""
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


def evaluate_imported(
    model: LanguageModel, train_ids: np.ndarray, valid_ids: np.ndarray, params: PretrainParams, device: torch.device,
    objective: Objective = Objective(),
) -> PretrainResult:
    """For a loaded checkpoint (`pretrain.init_from`): no training, the same loss measurements at step 0."""
    model.to(device)
    train_sets = objective.valid_batches(train_ids, params, 0, "the corpus's training part")
    valid_sets = objective.valid_batches(valid_ids, params, 0, "the corpus's validation part")
    train_loss = evaluate_lm(model, train_sets[0], params.eval_batches, device)["loss"]
    return PretrainResult(
        steps=0,
        train_log=[{"step": 0, "epoch": 0, "train_loss": train_loss, "lr": 0.0}],
        valid_log=[{"step": 0, **validation_row(model, valid_sets, params.eval_batches, device)}],
    )


def total_steps(params: PretrainParams, batches: PackedBatches) -> int:
    return params.max_steps or params.epochs * batches.steps_per_epoch()


@dataclass(frozen=True)
class LoopOptions:
    """How a pretraining run goes, apart from what it trains (model, data, params): the same for both phases.
    `compile_steps` (`train.compile`) runs the losses through torch.compile; with `snapshots`, the state is saved
    every `snapshots.every` steps and at the end of each phase, and a matching snapshot is resumed from."""

    device: torch.device = torch.device("cpu")
    seed: int = 0
    log_every: int = 50
    log_metrics: MetricsLogger = _no_log
    snapshots: Snapshots | None = None
    objective: Objective = Objective()
    compile_steps: bool = False


@dataclass(frozen=True)
class Phase:
    """Which of the two phases runs: its snapshot's name, its progress bar's label, what it reads (for
    messages), and the step its logged steps count from (the adaptation continues the corpus phase's curve)."""

    name: str = "corpus"
    desc: str = "pretrain"
    data_name: str = "the corpus"
    first_step: int = 0


class _LanguageModelling:
    """Pretraining as a task of the training loop (`training.loop.Task`): packed (or paired) batches, the
    objective's losses, a train-log row every `log_every` steps, a validation row every `eval_every`."""

    def __init__(self, model: LanguageModel, batches, valid_sets: tuple, params: PretrainParams,
                 options: LoopOptions, phase: Phase, result: PretrainResult):
        self.model, self.batches, self.valid_sets, self.params = model, batches, valid_sets, params
        self.options, self.phase, self.result = options, phase, result
        self.optimizer = make_optimizer(model.parameters(), params.lr, params.weight_decay)
        self.scheduler = warmup_cosine(self.optimizer, params.warmup_steps, result.steps)
        self.grad_clip = params.grad_clip
        self.step = _step_function(model, options.objective, options.device, options.compile_steps)

    def order_state(self):
        return self.batches.generator.get_state()

    def set_order_state(self, state) -> None:
        self.batches.generator.set_state(state)

    def epoch_batches(self, skip: int):
        self.model.train()
        return self.batches.epoch(skip=skip)

    def tally(self, batch, losses: dict[str, torch.Tensor]) -> dict[str, float]:
        """Each loss the objective measured, and the tokens read (inputs, targets[, segments, is_next])."""
        tokens = batch[0].numel()
        self.result.tokens_seen += tokens
        return {**{key: value.item() for key, value in losses.items()}, "tokens": tokens}

    def postfix(self, at: Position) -> dict[str, str]:
        return {"loss": f"{at.sums['loss'] / at.batches:.3f}",
                "tok_s": f"{at.sums['tokens'] / max(at.window_seconds, 1e-9):.0f}"}

    def report(self, at: Position) -> None:
        """The logging window's means as a train-log row, and its tokens per second (timings, kept apart)."""
        step = self.phase.first_step + at.step
        row = {"step": step, "epoch": at.epoch, "train_loss": at.sums["loss"] / at.batches,
               "lr": self.scheduler.get_last_lr()[0],
               **{f"train_{key}": total / at.batches for key, total in at.sums.items() if key not in ("loss", "tokens")}}
        tokens_per_s = at.sums["tokens"] / max(at.window_seconds, 1e-9)
        self.result.train_log.append(row)
        self.result.throughput.append({"step": step, "tokens_per_s": round(tokens_per_s, 1)})
        self.options.log_metrics({**{k: v for k, v in row.items() if k != "step"}, "tokens_per_s": tokens_per_s}, step)

    def validate(self, at: Position) -> None:
        scores = validation_row(self.model, self.valid_sets, self.params.eval_batches, self.options.device)
        self.result.valid_log.append({"step": self.phase.first_step + at.step, **scores})
        self.options.log_metrics(scores, self.phase.first_step + at.step)

    def results(self) -> dict:
        return asdict(self.result)

    def restore(self, results: dict, log_again: bool) -> None:
        self.result = PretrainResult(**results)
        if log_again:
            _log_again(self.result, self.options.log_metrics)


def pretrain(
    model: LanguageModel, train_ids: np.ndarray, valid_ids: np.ndarray, params: PretrainParams,
    options: LoopOptions = LoopOptions(), phase: Phase = Phase(),
) -> PretrainResult:
    """Language-model training (`options.objective`: next-token by default) on `train_ids`, scored on
    `valid_ids`; one phase (`phase`: the corpus by default), on the training loop (`training.loop`). A resumed
    phase logs its rows so far again, so the new MLflow run is complete; a phase that a snapshot says is done
    returns its result at once."""
    objective, device = options.objective, options.device
    train_batches = objective.train_batches(train_ids, params, options.seed, f"{phase.data_name}'s training part")
    valid_sets = objective.valid_batches(valid_ids, params, options.seed, f"{phase.data_name}'s validation part")
    model.to(device).train()
    steps = total_steps(params, train_batches)
    task = _LanguageModelling(model, train_batches, valid_sets, params, options, phase, PretrainResult(steps=steps))
    schedule = Schedule(steps, train_batches.steps_per_epoch(), report_every=options.log_every,
                        validate_every=params.eval_every, validate_first=True)
    ended = train(task, schedule, RunOptions(device, options.seed, phase.desc, options.snapshots, phase.name))
    task.result.seconds = ended.seconds
    return task.result


def _step_function(model: LanguageModel, objective: Objective, device: torch.device, compile_steps: bool):
    """batch -> (the loss to step on, every loss the objective measured): one process, or this rank's share."""
    world = distributed.world()
    if world.size == 1:  # one process: no change
        return functools.partial(_local_losses, compiled(model.losses, compile_steps), device=device)
    idle_head = getattr(model, "next_sentence", False) and not objective.next_sentence  # the adaptation phase
    trainer = compiled(distributed.wrap(model, _losses, device, unused_parameters=idle_head), compile_steps)
    return functools.partial(_sharded_losses, trainer, world=world, device=device)


def _local_losses(step_losses, batch: list[torch.Tensor], device: torch.device):
    """One process's batch: the loss to step on, and every loss the objective measured."""
    with autocast(device):
        losses = step_losses(*batch)
    return losses["loss"], losses


def _losses(model: LanguageModel, *batch: torch.Tensor) -> dict[str, torch.Tensor]:
    return model.losses(*batch)


def _sharded_losses(trainer, batch: list[torch.Tensor], world: distributed.World, device: torch.device):
    """Under DDP: this rank's rows of the global batch. Returns the loss to backpropagate, weighted so that the
    all-reduced gradient is the global batch's (token scores by the rank's share of the scored tokens,
    next-sentence scores by its share of the pairs), and the global batch's measurements (what one process logs)."""
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


def _log_again(result: PretrainResult, log_metrics: MetricsLogger) -> None:
    """Log a resumed phase's rows so far into the new run (the killed run holds them too)."""
    speeds = {row["step"]: row["tokens_per_s"] for row in result.throughput}
    for row in result.train_log:
        log_metrics({**{k: v for k, v in row.items() if k != "step"}, "tokens_per_s": speeds[row["step"]]},
                    row["step"])
    for row in result.valid_log:
        log_metrics({k: v for k, v in row.items() if k != "step"}, row["step"])


def adaptation_steps(adapt_epochs: int | float, steps_per_epoch: int) -> int:
    """Steps of the adaptation phase: whole passes, or a fraction of them (at least one step when it is on)."""
    if float(adapt_epochs).is_integer():
        return int(adapt_epochs) * steps_per_epoch
    return max(1, round(adapt_epochs * steps_per_epoch))


def adapt_to_task(
    model: LanguageModel, train_texts: np.ndarray, valid_texts: np.ndarray, params: PretrainParams,
    options: LoopOptions = LoopOptions(), first_step: int = 0,
) -> PretrainResult:
    """ULMFiT's second step: keep training the LM on the task's own (train) texts, labels unused; its logged
    steps count from `first_step` (where the corpus phase ended).

    The general corpus teaches language; this phase teaches the kind of text the classifier will read.
    `pretrain.adapt_epochs` passes at `pretrain.adapt_lr`, warm-up over the first 10% of its steps; masked
    language modelling adapts without next-sentence prediction (the task's texts are independent sentences).
    """
    steps = adaptation_steps(params.adapt_epochs, PackedBatches(train_texts, params.seq_len, params.batch_size,
                                                                what=TASK_TEXTS).steps_per_epoch())
    whole = float(params.adapt_epochs).is_integer()  # whole passes run as before; a fraction stops at its steps
    if params.adapt_max_steps and steps > params.adapt_max_steps:
        print(f"adapt: {params.adapt_epochs:g} epochs of the task's texts would be {steps:,} steps; capped at "
              f"{params.adapt_max_steps:,} (pretrain.adapt_max_steps)")
        steps, whole = params.adapt_max_steps, False
    phase = params.model_copy(update={"epochs": math.ceil(params.adapt_epochs), "max_steps": 0 if whole else steps,
                                      "lr": params.adapt_lr, "warmup_steps": max(1, steps // 10)})
    options = replace(options, seed=options.seed + 1, objective=options.objective.without_next_sentence())
    return pretrain(model, train_texts, valid_texts, phase, options, Phase("task", "adapt", TASK_TEXTS, first_step))


Phases = list[tuple[str, PretrainResult]]  # ("corpus", ...), then ("task", ...) when the LM adapted


def phase_logs(phases: Phases) -> tuple[list[dict], list[dict]]:
    """The train and validation rows of every phase, tagged with it (`metrics/pretrain/*.tsv`); a column one phase
    lacks (next-sentence scores during the adaptation) is left empty in its rows."""
    logs = []
    for which in ("train_log", "valid_log"):
        rows = [{**row, "phase": name} for name, phase in phases for row in getattr(phase, which)]
        columns = list(dict.fromkeys(key for row in rows for key in row if key != "phase")) + ["phase"]
        logs.append([{key: row.get(key, "") for key in columns} for row in rows])
    return logs[0], logs[1]


def pretrain_summary(phases: Phases, objective: Objective) -> dict:
    """`metrics/pretrain.json`: where the corpus phase ended (and the adaptation, if any)."""
    result = phases[0][1]
    summary = {
        "objective": objective.name,
        "next_sentence": objective.next_sentence,
        "val_perplexity": result.valid_log[-1]["val_perplexity"],
        "val_loss": result.final_val_loss,
        "initial_val_loss": result.valid_log[0]["val_loss"],
        "steps": result.steps,
        "tokens_seen": result.tokens_seen,
    }
    summary.update({key: value for key, value in result.valid_log[-1].items()  # the objective's extras
                    if key.startswith(("val_masked", "val_nsp"))})
    if len(phases) > 1:
        adaptation = phases[1][1]
        summary.update({
            "task_initial_val_perplexity": adaptation.valid_log[0]["val_perplexity"],
            "task_val_perplexity": adaptation.valid_log[-1]["val_perplexity"],
            "adapt_steps": adaptation.steps,
            "adapt_tokens_seen": adaptation.tokens_seen,
        })
    return summary


def pretrain_timings(phases: Phases) -> dict:
    """Seconds and tokens/s, kept apart from the results (`timings/`, MLflow)."""
    seconds = sum(phase.seconds for _, phase in phases)
    return {"seconds": round(seconds, 2),
            "tokens_per_second": round(sum(p.tokens_seen for _, p in phases) / max(seconds, 1e-9), 1),
            "throughput": [row for _, phase in phases for row in phase.throughput]}
