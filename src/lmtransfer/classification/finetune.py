"""Fine-tuning for classification: one code path for the pretrained and the scratch model.

Per epoch: shuffled batches, length-bucketed or random (`finetune.batches`, `datasets.classification_batches`),
one clipped AdamW step each, then validation; the best epoch's weights are kept. With snapshots, one after
each epoch, and one after any batch where the training hands itself over to a new process (`training.handover`).
"""

from __future__ import annotations

import copy
import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from lmtransfer.classification.config import FinetuneParams
from lmtransfer.classification.inference import predict
from lmtransfer.core.errors import TokenizerError
from lmtransfer.harness.progress import progress_bar
from lmtransfer.modeling.model import Classifier, count_parameters
from lmtransfer.modeling.runtime import autocast, compiled, to_device
from lmtransfer.tokens.datasets import classification_batches
from lmtransfer.tokens.tokenized import LabeledSplit
from lmtransfer.training import distributed
from lmtransfer.training.handover import continues_a_run, hand_over_if_due, neighbour_watch
from lmtransfer.training.optim import make_optimizer, optimizer_step, warmup_constant, warmup_cosine
from lmtransfer.training.resume import Snapshots, restore_training_state, training_state

EpochCallback = Callable[[dict[str, float]], None]


@dataclass
class FinetuneResult:
    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    best_val_accuracy: float = -1.0
    best_state: dict | None = None
    seconds: float = 0.0  # wall clock: reported apart from the results, which must not vary run to run
    epoch_seconds: list[float] = field(default_factory=list)


def discriminative_param_groups(model: Classifier, lr: float, head_lr_multiplier: float, layer_lr_decay: float):
    """Param groups from the head down: head lr x multiplier, top layer lr, then x decay per layer, embedding last.

    The same groups serve the pretrained and the scratch model (one recipe for both).
    """
    layers = list(model.base.layers.layers)
    groups = [{"params": list(model.head.parameters()), "lr": lr * head_lr_multiplier}]
    for depth, layer in enumerate(reversed(layers)):
        groups.append({"params": list(layer.parameters()), "lr": lr * layer_lr_decay**depth})
    grouped = {id(p) for g in groups for p in g["params"]}
    rest = [p for p in model.parameters() if id(p) not in grouped]  # the token embedding
    groups.append({"params": rest, "lr": lr * layer_lr_decay ** len(layers)})
    return groups


def set_backbone_frozen(model: Classifier, frozen: bool) -> None:
    for parameter in model.base.parameters():
        parameter.requires_grad = not frozen


def describe_trainable(model: Classifier, frozen: bool, desc: str) -> str:
    """The log line that says what actually learns: with a frozen backbone, the head alone, in both variants."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    line = f"{desc}: {trainable:,} trainable of {count_parameters(model):,} parameters"
    if frozen:
        line += (" (finetune.freeze_backbone: the base is frozen in both variants, so the scratch model trains a "
                 "head on random features: the control for the pretrained model's head on learned ones)")
    return line


@dataclass
class EpochSoFar:
    """How far the current epoch went: batches done and their sums (a handover mid-epoch saves and resumes it)."""

    batches: int = 0
    loss_sum: float = 0.0
    correct: int = 0
    seen: int = 0
    seconds: float = 0.0


@dataclass
class _Training:
    """A fine-tuning under way: what it trains with, and what a snapshot holds, after an epoch or in one."""

    model: Classifier
    optimizer: torch.optim.Optimizer
    scheduler: Any
    generator: np.random.Generator  # draws each epoch's batch order
    device: torch.device
    snapshots: Snapshots | None
    result: FinetuneResult = field(default_factory=FinetuneResult)
    so_far: EpochSoFar | None = None  # a snapshot's epoch under way
    epoch_order: dict | None = None  # the generator's state before the current epoch drew its order
    start: float = 0.0  # perf_counter of the start, less the seconds before a resume
    epoch_start: float = 0.0  # the same for the current epoch

    def snapshot(self, so_far: EpochSoFar | None = None) -> None:
        """After an epoch, or in one (`so_far`): then the generator is saved as it was before the epoch drew its
        batches, so that the process that resumes draws them again and goes on after those done."""
        self.result.seconds = time.perf_counter() - self.start
        if so_far:
            so_far.seconds = time.perf_counter() - self.epoch_start
        self.snapshots.save("epochs", {
            "result": asdict(self.result), **training_state(self.model, self.optimizer, self.scheduler, self.device),
            "batch_order": self.epoch_order if so_far else self.generator.bit_generator.state,
            "epoch_so_far": asdict(so_far) if so_far else None,
        })

    def resume(self, params: FinetuneParams, desc: str, on_epoch: EpochCallback | None) -> None:
        """The last snapshot back in place (its epochs passed to `on_epoch` again, unless this process continues
        the run that logged them: a handover), if there is one."""
        saved = self.snapshots.load("epochs") if self.snapshots else None
        if not saved:
            return
        restore_training_state(saved, self.model, self.optimizer, self.scheduler)
        self.generator.bit_generator.state = saved["batch_order"]
        self.result = FinetuneResult(**saved["result"])
        self.so_far = EpochSoFar(**saved["epoch_so_far"]) if saved["epoch_so_far"] else None
        done = len(self.result.history)
        where = (f"at batch {self.so_far.batches} of epoch {done + 1}" if self.so_far else f"after epoch {done}")
        print(f"{desc}: resumed from the snapshot {where} of {params.epochs}", flush=True)
        if on_epoch and not continues_a_run():
            for row in self.result.history:
                on_epoch(row)


def finetune(
    model: Classifier,
    train: LabeledSplit,
    valid: LabeledSplit,
    params: FinetuneParams,
    device: torch.device,
    seed: int = 0,
    on_epoch: EpochCallback | None = None,
    desc: str = "finetune",
    snapshots: Snapshots | None = None,
    compile_steps: bool = False,
) -> FinetuneResult:
    """Train the classifier `params.epochs` epochs; with `snapshots`, save after each epoch and resume from the
    last one saved (its epochs are passed to `on_epoch` again, so a new MLflow run is complete).
    `compile_steps` (`train.compile`) runs the training forward through torch.compile."""
    refuse_padding_ids_in_texts(model.base.config.pad_id, train=train, valid=valid)
    model.to(device)
    set_backbone_frozen(model, params.freeze_backbone)
    groups = discriminative_param_groups(model, params.lr, params.head_lr_multiplier, params.layer_lr_decay)
    optimizer = make_optimizer(groups, params.lr, params.weight_decay)
    steps_per_epoch = -(-len(train) // params.batch_size)
    scheduler = (warmup_constant(optimizer, params.warmup_steps) if params.schedule == "constant"
                 else warmup_cosine(optimizer, params.warmup_steps, steps_per_epoch * params.epochs))
    print(describe_trainable(model, params.freeze_backbone, desc), flush=True)
    training = _Training(model, optimizer, scheduler, np.random.default_rng(seed), device, snapshots)
    distributed.Draws(seed)  # under DDP each rank draws its dropout from its own seed; one process: no change
    step = _step_function(model, device, compile_steps)
    training.resume(params, desc, on_epoch)
    result, watch = training.result, neighbour_watch(snapshots, device)
    training.start = time.perf_counter() - result.seconds
    for epoch in range(len(result.history) + 1, params.epochs + 1):
        train_loss, train_accuracy = _train_epoch(training, step, train, params, f"{desc} epoch {epoch}/{params.epochs}",
                                                  watch)
        row = _validated_epoch(model, valid, params, device, epoch, train_loss, train_accuracy)
        result.history.append(row)
        result.epoch_seconds.append(round(time.perf_counter() - training.epoch_start, 2))
        if row["val_accuracy"] > result.best_val_accuracy:
            result.best_val_accuracy, result.best_epoch = row["val_accuracy"], epoch
            result.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
        print(f"{desc} epoch {epoch}: train loss {row['train_loss']:.4f} acc {row['train_accuracy']:.4f} | "
              f"val loss {row['val_loss']:.4f} acc {row['val_accuracy']:.4f}", flush=True)
        if on_epoch:
            on_epoch(row)
        result.seconds = time.perf_counter() - training.start
        if snapshots and epoch < params.epochs:
            training.snapshot()
            hand_over_if_due(watch, lambda: None, f"the end of epoch {epoch} of {params.epochs}")
    if watch:
        watch.stop()
    return result


def _train_epoch(training: _Training, step, train: LabeledSplit, params: FinetuneParams, label: str,
                 watch) -> tuple[float, float]:
    """One pass over the shuffled batches, a clipped optimizer step each: the epoch's mean loss and accuracy.
    After each batch the training may hand itself over (`training.handover`, from a snapshot of the epoch so
    far); an epoch resumed from one goes on after the batches it had done."""
    so_far, training.so_far = training.so_far or EpochSoFar(), None
    training.epoch_start = time.perf_counter() - so_far.seconds
    model = training.model
    model.train()
    if params.freeze_backbone:
        model.base.eval()  # a frozen backbone is a fixed feature extractor: no dropout noise
    total = -(-len(train) // params.batch_size)
    progress = progress_bar(total=total, initial=so_far.batches, desc=label, unit="batch")
    training.epoch_order = training.generator.bit_generator.state
    batches = classification_batches(train, params.batch_size, params.max_len, model.base.config.pad_id,
                                     training.generator, bucketed=params.batches == "bucketed")
    for ids, labels in itertools.islice(batches, so_far.batches, None):
        ids, labels = to_device((ids, labels), training.device)
        loss, measured = step(ids, labels)
        optimizer_step(loss, model, training.optimizer, training.scheduler, params.grad_clip)
        so_far.loss_sum += measured["loss"].item() * len(labels)
        so_far.correct += int(measured["correct"].round())
        so_far.seen += len(labels)
        so_far.batches += 1
        progress.update(1)
        progress.set_postfix(loss=f"{so_far.loss_sum / so_far.seen:.3f}", acc=f"{so_far.correct / so_far.seen:.3f}",
                             refresh=False)
        hand_over_if_due(watch, lambda: training.snapshot(so_far), f"batch {so_far.batches} of {total} in {label}")
    progress.close()
    return so_far.loss_sum / so_far.seen, so_far.correct / so_far.seen


def _step_function(model: Classifier, device: torch.device, compile_steps: bool):
    """(ids, labels) -> (the loss to step on, its measurements): one process, or this rank's share under DDP."""
    world = distributed.world()
    if world.size == 1:
        return functools.partial(_local_step, compiled(model, compile_steps), device=device)
    trainer = compiled(distributed.wrap(model, _scores, device), compile_steps)
    return functools.partial(_sharded_step, trainer, world=world, device=device)


def _validated_epoch(model: Classifier, valid: LabeledSplit, params: FinetuneParams, device: torch.device, epoch: int,
                     train_loss: float, train_accuracy: float) -> dict[str, float]:
    """The epoch's row: its training loss and accuracy, and the validation split's."""
    probabilities, val_loss = predict(model, valid, params.batch_size * 2, params.max_len, device)
    return {"epoch": epoch, "train_loss": train_loss, "train_accuracy": train_accuracy, "val_loss": val_loss,
            "val_accuracy": float((probabilities.argmax(-1) == valid.labels).mean())}


def refuse_padding_ids_in_texts(pad_id: int, **splits: LabeledSplit) -> None:
    """A text holding the model's padding id is a model built for another id space: that token would be masked
    as padding, and last-token pooling would read an earlier piece, with no error (a course dictionary puts
    begin-of-text at 0, where this project's own tokenizers put padding)."""
    for name, split in splits.items():
        if np.any(split.ids == pad_id):
            raise TokenizerError(f"the {name} texts hold the model's padding id {pad_id}: the model was built for "
                                 "another tokenizer's id space (its pad_id must be the tokenizer's)")


def _scores(model: Classifier, ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    logits = model(ids).float()
    return {"loss": F.cross_entropy(logits, labels), "correct": (logits.argmax(-1) == labels).sum()}


def _local_step(forward, ids: torch.Tensor, labels: torch.Tensor, device: torch.device):
    """One process's batch: the loss to step on, and the loss and number correct it measured."""
    with autocast(device):
        logits = forward(ids).float()
    loss = F.cross_entropy(logits, labels)
    return loss, {"loss": loss, "correct": (logits.argmax(-1) == labels).sum()}


def _sharded_step(trainer, ids: torch.Tensor, labels: torch.Tensor, world: distributed.World, device: torch.device):
    """Under DDP: this rank's texts of the global batch; the loss to backpropagate, weighted by the rank's share of
    the texts so the all-reduced gradient is the global batch's, and the global batch's loss and correct count."""
    total = len(labels)
    (ids, labels), present = distributed.my_rows([ids, labels], world)
    with autocast(device):
        scores = trainer(ids, labels)
    weight = present * len(labels) / total
    return scores["loss"] * weight * world.size, distributed.sum_over_ranks(
        {"loss": scores["loss"] * weight, "correct": scores["correct"] * present})
