"""The one training loop (`training.loop`): when it reports, validates and snapshots, and that a run interrupted at
any step and resumed from its snapshot ends as the uninterrupted run does, whatever the task's schedule."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from lmtransfer.training.loop import Position, RunOptions, Schedule, train
from lmtransfer.training.optim import make_optimizer, warmup_cosine
from lmtransfer.training.resume import Snapshots

X = torch.linspace(-1, 1, 40).reshape(20, 2)
Y = X.sum(1, keepdim=True) * 0.5


class Stop(Exception):
    """Stands in for a kill."""


@dataclass
class Recorder:
    """A regression task that writes down every hook the loop calls, with the step it was at."""

    stop_at: int = -1  # raise Stop once this step is counted
    calls: list[tuple] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)  # the task's results: one per report

    def __post_init__(self):
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
        self.optimizer = make_optimizer(self.model.parameters(), 0.05, 0.0)
        self.scheduler = warmup_cosine(self.optimizer, 2, 20)
        self.grad_clip, self.generator = 1.0, np.random.default_rng(1)

    def order_state(self):
        return self.generator.bit_generator.state

    def set_order_state(self, state) -> None:
        self.generator.bit_generator.state = state

    def epoch_batches(self, skip: int):
        self.model.train()
        order = self.generator.permutation(20)
        return itertools.islice(((X[order[i:i + 3]], Y[order[i:i + 3]]) for i in range(0, 20, 3)), skip, None)

    def step(self, batch):
        loss = torch.nn.functional.mse_loss(self.model(batch[0]), batch[1])  # dropout: torch's generator
        return loss, loss

    def tally(self, batch, loss) -> dict[str, float]:
        return {"loss": loss.item() * len(batch[0]), "seen": len(batch[0])}

    def postfix(self, at: Position) -> dict[str, str]:
        self.calls.append(("postfix", at.step, at.window_seconds))
        return {}

    def report(self, at: Position) -> None:
        self.calls.append(("report", at.step, at.epoch, at.batches))
        self.rows.append({"step": at.step, "loss": at.sums["loss"] / at.sums["seen"]})
        if at.step == self.stop_at:
            raise Stop

    def validate(self, at: Position) -> None:
        self.calls.append(("validate", at.step, at.epoch))

    def results(self) -> dict:
        return {"rows": self.rows}

    def restore(self, results: dict, log_again: bool) -> None:
        self.rows = results["rows"]


BY_STEPS = Schedule(total_steps=17, steps_per_epoch=7, report_every=4, validate_every=6, validate_first=True)
BY_EPOCHS = Schedule(total_steps=17, steps_per_epoch=7)  # the last epoch cut at 3 of its 7 batches


def _hooks(task: Recorder) -> list[tuple]:
    return [call for call in task.calls if call[0] != "postfix"]


def test_a_schedule_by_steps_reports_and_validates_where_it_says_and_at_the_end():
    task = Recorder()
    at = train(task, BY_STEPS)
    assert at.step == 17 and at.epoch == 3
    assert _hooks(task) == [("validate", 0, 0), ("report", 4, 1, 4), ("validate", 6, 1), ("report", 8, 2, 4),
                          ("report", 12, 2, 4), ("validate", 12, 2), ("report", 16, 3, 4), ("report", 17, 3, 1),
                          ("validate", 17, 3)]


def test_a_schedule_by_epochs_reports_then_validates_at_each_epochs_end_and_a_step_budget_ends_the_last():
    task = Recorder()
    train(task, BY_EPOCHS)
    assert _hooks(task) == [("report", 7, 1, 7), ("validate", 7, 1), ("report", 14, 2, 7), ("validate", 14, 2),
                          ("report", 17, 3, 3), ("validate", 17, 3)]


@pytest.mark.parametrize("schedule", [BY_STEPS, BY_EPOCHS], ids=["by-steps", "by-epochs"])
def test_a_run_stopped_at_any_report_and_resumed_ends_as_the_uninterrupted_one(schedule, tmp_path):
    reference = Recorder()
    train(reference, schedule)
    stops, saved = sorted({call[1] for call in reference.calls if call[0] == "report"})[:-1], 0
    for stop in stops:
        snapshots = Snapshots("train", "same", every=1, root=tmp_path / str(stop))
        with pytest.raises(Stop):
            train(Recorder(stop_at=stop), schedule, RunOptions(snapshots=snapshots))
        resumed = Recorder()  # built as the first process was; a snapshot, if any, then puts back its state
        if list(snapshots.directory.glob("*.pt")):
            saved += 1
            torch.rand(5), resumed.generator.random(3)  # generators moved on: only the snapshot's state is right
        train(resumed, schedule, RunOptions(snapshots=snapshots))
        assert resumed.rows == reference.rows, f"stopped at step {stop}"
        assert all(torch.equal(a, b) for a, b in zip(resumed.model.state_dict().values(),
                                                     reference.model.state_dict().values())), f"step {stop}"
    assert saved >= 1  # some stops came after a snapshot (a schedule by epochs saves at each epoch's end)


def test_a_snapshot_of_a_finished_run_returns_its_results_without_training(tmp_path):
    snapshots = Snapshots("train", "same", every=1, root=tmp_path)
    first = Recorder()
    train(first, BY_EPOCHS, RunOptions(snapshots=snapshots))
    again = Recorder()
    at = train(again, BY_EPOCHS, RunOptions(snapshots=snapshots))
    assert at.step == 17 and again.rows == first.rows and again.calls == []


def test_the_figures_beside_the_progress_bar_read_the_windows_time_so_far():
    """Tokens per second beside the bar divide by the window's seconds: read at each step, never 0."""
    task = Recorder()
    train(task, BY_STEPS)
    seconds = [call[2] for call in task.calls if call[0] == "postfix"]
    assert len(seconds) == 17 and all(s > 0 for s in seconds)
