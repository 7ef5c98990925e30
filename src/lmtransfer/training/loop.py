"""The one training loop: language-model pretraining, classification fine-tuning and translation fine-tuning all
run on `train`.

It reads top to bottom: epochs of batches, one clipped AdamW step each, the step's measurements summed into a
window that is reported every `Schedule.report_every` steps (or at each epoch's end), a validation every
`Schedule.validate_every` steps (or at each epoch's end) and resume snapshots. What is a task's own comes from
its `Task`: its batches, its step, what it reports and validates, and what a snapshot keeps of its results.

A snapshot holds the weights, optimizer, schedule, the global generators, the batch order's generator as it was
before the epoch under way drew, the position in the data and the task's results so far; on a CPU a run killed
and resumed from one ends with the bytes of a run never interrupted (`training.resume`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from lmtransfer.harness.progress import progress_bar
from lmtransfer.modeling.runtime import to_device
from lmtransfer.training import distributed
from lmtransfer.training.optim import optimizer_step
from lmtransfer.training.resume import Snapshots, restore_training_state, training_state


@dataclass(frozen=True)
class Schedule:
    """When, in optimizer steps, a training does what: how long it runs, when it reports and validates."""

    total_steps: int
    steps_per_epoch: int
    report_every: int = 0  # 0: at each epoch's end; always at the last step
    validate_every: int = 0  # 0: at each epoch's end, a snapshot after it; else every so many steps and at the end
    validate_first: bool = False  # once before the first step: where a curve starts

    @property
    def epochs(self) -> int:
        return -(-self.total_steps // max(1, self.steps_per_epoch))


@dataclass(frozen=True)
class RunOptions:
    """How one training runs, beside its task and data: the device, the seed of its random draws (the batch order
    and dropout of a fine-tune, DDP's `distributed.Draws`), its label in the log, its resume snapshots
    (`snapshot` names the file: one per pretraining phase), what hears of each finished epoch (a fine-tune's
    MLflow logging), and whether the training forward runs through torch.compile (`train.compile`)."""

    device: torch.device = torch.device("cpu")
    seed: int = 0
    desc: str = "train"
    snapshots: Snapshots | None = None
    snapshot: str = "training"
    on_epoch: Callable[..., None] | None = None
    compile_steps: bool = False


@dataclass
class Position:
    """Where training is, and the window of measurements under way: what a snapshot keeps besides the weights,
    optimizer, schedule and generators. Tasks read it in their hooks."""

    step: int = 0  # optimizer steps done
    epoch: int = 0  # the epoch under way, from 1 (the last one finished when `batch` is 0)
    batch: int = 0  # batches done in the epoch under way
    epoch_order: Any = None  # the batch order's generator before the epoch under way drew
    sums: dict[str, float] = field(default_factory=dict)  # the window's sums of what each step measured
    batches: int = 0  # steps in the window
    seconds: float = 0.0  # training time so far (a resumed run's clock goes on from the snapshot's)
    window_seconds: float = 0.0  # the window's

    def count(self, measured: dict[str, float]) -> None:
        """One optimizer step done: the position moves on and the window adds what the step measured."""
        self.step += 1
        self.batch += 1
        self.batches += 1
        for key, value in measured.items():
            self.sums[key] = self.sums.get(key, 0.0) + value


class Task(Protocol):
    """What `train` trains: a model with its optimizer, and the hooks that are the task's own."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    grad_clip: float

    def order_state(self) -> Any:
        """The state of the generator that draws the batch order (saved before each epoch draws)."""

    def set_order_state(self, state: Any) -> None: ...

    def epoch_batches(self, skip: int):
        """The epoch's batches after its first `skip`, drawn from the generator as it is now; the model set to train."""

    def step(self, batch) -> tuple[torch.Tensor, Any]:
        """The loss to step on, and what the task measures of it (read after the optimizer step, by `tally`)."""

    def tally(self, batch, measured: Any) -> dict[str, float]:
        """What the window adds up for this step (summed as Python floats, in this order)."""

    def postfix(self, at: Position) -> dict[str, str]:
        """The progress bar's figures for the window so far."""

    def report(self, at: Position) -> None:
        """The window closes: its means become a row (logged)."""

    def validate(self, at: Position) -> None:
        """Score the model on held-out data, keep its row (and the best state, where the task keeps one)."""

    def results(self) -> dict:
        """The task's results so far, as a snapshot keeps them."""

    def restore(self, results: dict, log_again: bool) -> None:
        """A snapshot's results back in place; `log_again`: into a new MLflow run, which lacks them."""


class NumpyBatchOrder:
    """For a task whose batch order a numpy generator draws (`self.generator`): its state, as a snapshot keeps it."""

    generator: np.random.Generator

    def order_state(self) -> dict:
        return self.generator.bit_generator.state

    def set_order_state(self, state: dict) -> None:
        self.generator.bit_generator.state = state


def train(task: Task, schedule: Schedule, options: RunOptions = RunOptions()) -> Position:
    """Train `task` for `schedule.total_steps` steps, from a matching snapshot if there is one; returns where it
    ended (its `seconds` are the training's)."""
    at = Position()
    resumed = _resume(task, at, schedule, options)
    if resumed is True:  # the snapshot of a training that had ended
        return at
    if resumed is None and schedule.validate_first:
        task.validate(at)
    clock = _Clock(at)
    draws = distributed.Draws(options.seed)
    while at.step < schedule.total_steps:
        _epoch(task, schedule, options, at, clock, draws)
    draws.close()
    if schedule.validate_every:
        clock.tick()
        task.validate(at)
    clock.tick()
    if options.snapshots:
        _save(task, at, options, done=True)  # a kill before the outputs are written resumes to here, not before
    return at


def _epoch(task: Task, schedule: Schedule, options: RunOptions, at: Position, clock: _Clock, draws) -> None:
    """The rest of the epoch under way (or a new one): a step per batch, reports, validations and snapshots when
    due, then the epoch's end."""
    if at.batch == 0:
        at.epoch += 1
        at.epoch_order = task.order_state()
    total = schedule.total_steps
    in_epoch = min(schedule.steps_per_epoch, at.batch + total - at.step)
    label = f"{options.desc} epoch {at.epoch}/{schedule.epochs}"
    progress = progress_bar(total=in_epoch, initial=at.batch, desc=label, unit="batch")
    for batch in draws.batches(itertools.islice(task.epoch_batches(at.batch), total - at.step)):
        batch = to_device(batch, options.device)
        loss, measured = task.step(batch)
        optimizer_step(loss, task.model, task.optimizer, task.scheduler, task.grad_clip)
        at.count(task.tally(batch, measured))
        progress.update(1)
        clock.tick()  # the window's seconds so far, for the figures beside the bar (tokens per second)
        progress.set_postfix(task.postfix(at), refresh=False)
        last = at.step == total
        report = schedule.report_every and (at.step % schedule.report_every == 0 or last)
        validate = schedule.validate_every and at.step % schedule.validate_every == 0 and not last
        _checkpoint(task, at, clock, report, validate)
        if last:
            break
        if options.snapshots and schedule.validate_every and options.snapshots.due(at.step):
            _save(task, at, options)
    progress.close()
    _checkpoint(task, at, clock, not schedule.report_every, not schedule.validate_every)
    at.batch, at.epoch_order = 0, task.order_state()  # the epoch is over: a resume starts the next one
    if at.step < total and not schedule.validate_every and options.snapshots:
        _save(task, at, options)


def _checkpoint(task: Task, at: Position, clock: _Clock, report: bool, validate: bool) -> None:
    """A report and/or a validation, the clock read before each; the window starts again after a report."""
    if report:
        clock.tick()
        task.report(at)
    if validate:
        clock.tick()
        task.validate(at)
    if report:
        clock.restart_window()


class _Clock:
    """Training time, kept in the position (so a resumed run's goes on): in all, and in the window under way."""

    def __init__(self, at: Position):
        now = time.perf_counter()
        self.at, self.origin, self.window_origin = at, now - at.seconds, now - at.window_seconds

    def tick(self) -> None:
        now = time.perf_counter()
        self.at.seconds, self.at.window_seconds = now - self.origin, now - self.window_origin

    def restart_window(self) -> None:
        self.window_origin = time.perf_counter()
        self.at.sums, self.at.batches, self.at.window_seconds = {}, 0, 0.0


def _save(task: Task, at: Position, options: RunOptions, done: bool = False) -> None:
    """A resume snapshot of the training as it is (`done`: it has ended, a resume returns its results at once)."""
    options.snapshots.save(options.snapshot, {
        "done": done, "position": asdict(at), "results": task.results(),
        **training_state(task.model, task.optimizer, task.scheduler, options.device),
    })


def _resume(task: Task, at: Position, schedule: Schedule, options: RunOptions) -> bool | None:
    """A matching snapshot back in place: None if there was none, else whether its training had ended. Its rows
    are logged again into the new MLflow run."""
    saved = options.snapshots.load(options.snapshot) if options.snapshots else None
    if not saved:
        return None
    restore_training_state(saved, task.model, task.optimizer, task.scheduler)
    for key, value in saved["position"].items():
        setattr(at, key, value)
    task.set_order_state(at.epoch_order)
    task.restore(saved["results"], log_again=True)
    where = f"at batch {at.batch} of epoch {at.epoch}" if at.batch else f"after epoch {at.epoch}"
    print(f"{options.desc}: resumed from the snapshot {where} of {schedule.epochs} (step {at.step} of "
          f"{schedule.total_steps})", flush=True)
    return bool(saved["done"])
