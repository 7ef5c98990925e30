"""Fine-tuning for classification: one code path for the pretrained and the scratch model.

Per epoch: shuffled batches, length-bucketed or random (`finetune.batches`, `datasets.classification_batches`),
one clipped AdamW step each, then validation; the best epoch's weights are kept.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

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
from lmtransfer.training.resume import Snapshots, rng_state, set_rng_state

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
    generator = np.random.default_rng(seed)
    distributed.Draws(seed)  # under DDP each rank draws its dropout from its own seed; one process: no change
    step = _step_function(model, device, compile_steps)
    result = _resumed(snapshots, model, optimizer, scheduler, generator, params, desc, on_epoch)
    watch = neighbour_watch(snapshots, device)
    start = time.perf_counter() - result.seconds
    for epoch in range(len(result.history) + 1, params.epochs + 1):
        model.train()
        if params.freeze_backbone:
            model.base.eval()  # a frozen backbone is a fixed feature extractor: no dropout noise
        epoch_start = time.perf_counter()
        progress = progress_bar(total=steps_per_epoch, desc=f"{desc} epoch {epoch}/{params.epochs}", unit="batch")
        batches = classification_batches(train, params.batch_size, params.max_len, model.base.config.pad_id, generator,
                                         bucketed=params.batches == "bucketed")
        train_loss, train_accuracy = _train_epoch(step, batches, model, optimizer, scheduler, params.grad_clip,
                                                  device, progress)
        row = _validated_epoch(model, valid, params, device, epoch, train_loss, train_accuracy)
        result.history.append(row)
        result.epoch_seconds.append(round(time.perf_counter() - epoch_start, 2))
        if row["val_accuracy"] > result.best_val_accuracy:
            result.best_val_accuracy, result.best_epoch = row["val_accuracy"], epoch
            result.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
        print(f"{desc} epoch {epoch}: train loss {row['train_loss']:.4f} acc {row['train_accuracy']:.4f} | "
              f"val loss {row['val_loss']:.4f} acc {row['val_accuracy']:.4f}", flush=True)
        if on_epoch:
            on_epoch(row)
        result.seconds = time.perf_counter() - start
        if snapshots and epoch < params.epochs:
            snapshots.save("epochs", {
                "result": asdict(result), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "rng": rng_state(device), "batch_order": generator.bit_generator.state,
            })
            hand_over_if_due(watch, lambda: None, f"the end of epoch {epoch} of {params.epochs}")
    if watch:
        watch.stop()
    return result


def _step_function(model: Classifier, device: torch.device, compile_steps: bool):
    """(ids, labels) -> (the loss to step on, its measurements): one process, or this rank's share under DDP."""
    world = distributed.world()
    if world.size == 1:
        return functools.partial(_local_step, compiled(model, compile_steps), device=device)
    trainer = compiled(distributed.wrap(model, _scores, device), compile_steps)
    return functools.partial(_sharded_step, trainer, world=world, device=device)


def _resumed(snapshots: Snapshots | None, model, optimizer, scheduler, generator, params: FinetuneParams, desc: str,
             on_epoch: EpochCallback | None) -> FinetuneResult:
    """The last epoch's snapshot back in place (its epochs passed to `on_epoch` again, unless this process
    continues the run that logged them: a handover), or a fresh result."""
    saved = snapshots.load("epochs") if snapshots else None
    if not saved:
        return FinetuneResult()
    result = _restore(saved, model, optimizer, scheduler, generator)
    print(f"{desc}: resumed from the snapshot after epoch {len(result.history)} of {params.epochs}", flush=True)
    if on_epoch and not continues_a_run():
        for row in result.history:
            on_epoch(row)
    return result


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


def _restore(saved: dict, model, optimizer, scheduler, generator: np.random.Generator) -> FinetuneResult:
    """The last epoch's snapshot back in place: weights, optimizer, schedule, every RNG and the batch order."""
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    set_rng_state(saved["rng"])
    generator.bit_generator.state = saved["batch_order"]
    return FinetuneResult(**saved["result"])


def _local_step(forward, ids: torch.Tensor, labels: torch.Tensor, device: torch.device):
    """One process's batch: the loss to step on, and the loss and number correct it measured."""
    with autocast(device):
        logits = forward(ids).float()
    loss = F.cross_entropy(logits, labels)
    return loss, {"loss": loss, "correct": (logits.argmax(-1) == labels).sum()}


def _train_epoch(step, batches, model, optimizer, scheduler, grad_clip: float, device: torch.device,
                 progress) -> tuple[float, float]:
    """One pass over the shuffled batches, a clipped optimizer step each: the epoch's mean loss and accuracy."""
    loss_sum, correct, seen = 0.0, 0, 0
    for ids, labels in batches:
        ids, labels = to_device((ids, labels), device)
        loss, measured = step(ids, labels)
        optimizer_step(loss, model, optimizer, scheduler, grad_clip)
        loss_sum += measured["loss"].item() * len(labels)
        correct += int(measured["correct"].round())
        seen += len(labels)
        progress.update(1)
        progress.set_postfix(loss=f"{loss_sum / seen:.3f}", acc=f"{correct / seen:.3f}", refresh=False)
    progress.close()
    return loss_sum / seen, correct / seen


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
