"""Fine-tuning for classification: one code path for the pretrained and the scratch model.

A task of the one training loop (`training.loop`). Per epoch: shuffled batches, length-bucketed or random
(`finetune.batches`, `datasets.classification_batches`), one clipped AdamW step each, then validation; the best
epoch's weights are kept. With snapshots, one after each epoch.
"""

from __future__ import annotations

import copy
import functools
import itertools
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch
from torch.nn import functional as F

from lmtransfer.classification.config import FinetuneParams
from lmtransfer.classification.inference import predict
from lmtransfer.core.errors import TokenizerError
from lmtransfer.modeling.model import Classifier, count_parameters
from lmtransfer.modeling.runtime import autocast, compiled
from lmtransfer.tokens.batches import classification_batches
from lmtransfer.tokens.id_files import LabeledSplit
from lmtransfer.training import distributed
from lmtransfer.training.loop import NumpyBatchOrder, Position, RunOptions, Schedule
from lmtransfer.training.loop import train as train_loop
from lmtransfer.training.optim import make_optimizer, warmup_constant, warmup_cosine


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


class _Classification(NumpyBatchOrder):
    """Fine-tuning for classification as a task of the training loop (`training.loop.Task`): shuffled batches of
    labeled texts, cross-entropy, the epoch's mean loss and accuracy, then the validation split's; the best
    epoch's weights are kept."""

    def __init__(self, model: Classifier, train: LabeledSplit, valid: LabeledSplit, params: FinetuneParams,
                 options: RunOptions):
        self.model, self.train, self.valid, self.params, self.device = model, train, valid, params, options.device
        self.on_epoch, self.desc, self.result = options.on_epoch, options.desc, FinetuneResult()
        groups = discriminative_param_groups(model, params.lr, params.head_lr_multiplier, params.layer_lr_decay)
        self.optimizer = make_optimizer(groups, params.lr, params.weight_decay)
        self.steps_per_epoch = -(-len(train) // params.batch_size)
        self.scheduler = (warmup_constant(self.optimizer, params.warmup_steps) if params.schedule == "constant"
                          else warmup_cosine(self.optimizer, params.warmup_steps,
                                             self.steps_per_epoch * params.epochs))
        self.grad_clip = params.grad_clip
        self.generator = np.random.default_rng(options.seed)  # draws each epoch's order
        self.forward_step = _step_function(model, options.device, options.compile_steps)
        self.train_means: tuple[float, float] = (0.0, 0.0)

    def epoch_batches(self, skip: int):
        self.model.train()
        if self.params.freeze_backbone:
            self.model.base.eval()  # a frozen backbone is a fixed feature extractor: no dropout noise
        batches = classification_batches(self.train, self.params.batch_size, self.params.max_len,
                                         self.model.base.config.pad_id, self.generator,
                                         bucketed=self.params.batches == "bucketed")
        return itertools.islice(batches, skip, None)

    def step(self, batch: list[torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        ids, labels = batch
        return self.forward_step(ids, labels)

    def tally(self, batch, measured: dict[str, torch.Tensor]) -> dict[str, float]:
        labels = batch[1]
        return {"loss": measured["loss"].item() * len(labels), "correct": int(measured["correct"].round()),
                "seen": len(labels)}

    def postfix(self, at: Position) -> dict[str, str]:
        return {"loss": f"{at.sums['loss'] / at.sums['seen']:.3f}", "acc": f"{at.sums['correct'] / at.sums['seen']:.3f}"}

    def report(self, at: Position) -> None:
        self.train_means = (at.sums["loss"] / at.sums["seen"], at.sums["correct"] / at.sums["seen"])

    def validate(self, at: Position) -> None:
        """The epoch's row (its training means, the validation split's loss and accuracy), the best state kept."""
        result, epoch = self.result, at.epoch
        probabilities, val_loss = predict(self.model, self.valid, self.params.batch_size * 2, self.params.max_len,
                                          self.device)
        row = {"epoch": epoch, "train_loss": self.train_means[0], "train_accuracy": self.train_means[1],
               "val_loss": val_loss, "val_accuracy": float((probabilities.argmax(-1) == self.valid.labels).mean())}
        result.history.append(row)
        result.epoch_seconds.append(round(at.window_seconds, 2))
        if row["val_accuracy"] > result.best_val_accuracy:
            result.best_val_accuracy, result.best_epoch = row["val_accuracy"], epoch
            result.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in self.model.state_dict().items()})
        print(f"{self.desc} epoch {epoch}: train loss {row['train_loss']:.4f} acc {row['train_accuracy']:.4f} | "
              f"val loss {row['val_loss']:.4f} acc {row['val_accuracy']:.4f}", flush=True)
        if self.on_epoch:
            self.on_epoch(row)

    def results(self) -> dict:
        return asdict(self.result)

    def restore(self, results: dict, log_again: bool) -> None:
        self.result = FinetuneResult(**results)
        if self.on_epoch and log_again:
            for row in self.result.history:
                self.on_epoch(row)


def finetune(model: Classifier, train: LabeledSplit, valid: LabeledSplit, params: FinetuneParams,
             options: RunOptions = RunOptions(desc="finetune")) -> FinetuneResult:
    """Train the classifier `params.epochs` epochs on the training loop (`training.loop`); `options.on_epoch`
    hears each epoch's row. With `options.snapshots`, save after each epoch and resume from the last one saved
    (its epochs are passed to `on_epoch` again, so a new MLflow run is complete)."""
    refuse_padding_ids_in_texts(model.base.config.pad_id, train=train, valid=valid)
    model.to(options.device)
    set_backbone_frozen(model, params.freeze_backbone)
    task = _Classification(model, train, valid, params, options)
    print(describe_trainable(model, params.freeze_backbone, options.desc), flush=True)
    schedule = Schedule(task.steps_per_epoch * params.epochs, task.steps_per_epoch)
    ended = train_loop(task, schedule, replace(options, snapshot="epochs"))
    task.result.seconds = ended.seconds
    return task.result


def _step_function(model: Classifier, device: torch.device, compile_steps: bool):
    """(ids, labels) -> (the loss to step on, its measurements): one process, or this rank's share under DDP."""
    world = distributed.world()
    if world.size == 1:
        return functools.partial(_local_step, compiled(model, compile_steps), device=device)
    trainer = compiled(distributed.wrap(model, _scores, device), compile_steps)
    return functools.partial(_sharded_step, trainer, world=world, device=device)


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
