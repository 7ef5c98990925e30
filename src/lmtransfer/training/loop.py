"""What the three training loops (pretraining, classification and translation fine-tuning) share: how a run goes
beside its model, data and params, and one clipped step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from lmtransfer.training.resume import Snapshots


@dataclass(frozen=True)
class RunOptions:
    """How one training runs: its device, the seed of its batch order and dropout, its label in the log, its resume
    snapshots, where its step metrics go (the stage's MLflow run), how many pretraining steps a logged row
    averages, and whether the training computation runs through torch.compile (`train.compile`)."""

    device: torch.device = torch.device("cpu")
    seed: int = 0
    desc: str = "train"
    snapshots: Snapshots | None = None
    log_metrics: Callable[[dict[str, float], int], None] = lambda metrics, step: None
    log_every: int = 50
    compile_steps: bool = False


def optimizer_step(loss: torch.Tensor, model: nn.Module, optimizer, scheduler, grad_clip: float) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    scheduler.step()


def cpu_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    """The weights as they are now, apart from the model's (the best epoch's, kept while training goes on)."""
    return {key: value.detach().to("cpu", copy=True) for key, value in model.state_dict().items()}
