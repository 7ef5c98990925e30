"""Fine-tuning for classification: one code path for the pretrained and the scratch model.

Sequences are right-padded per batch (padding id 0) and truncated to their
first `max_len` tokens, so last-token pooling reads the last kept piece, which
has seen all of the kept text. Batches group similar lengths to waste little
compute on padding.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import torch
from torch.nn import functional as F

from .config import FinetuneParams
from .model import Classifier
from .optim import make_optimizer, optimizer_step, warmup_cosine
from .runtime import autocast, progress_bar
from .tokenizer import PAD_ID, LabeledSplit

EpochCallback = Callable[[dict[str, float]], None]


def pad_batch(sequences: list[np.ndarray], max_len: int, pad_id: int = PAD_ID) -> torch.Tensor:
    """Right-pad to the longest sequence; longer ones keep their first max_len tokens."""
    width = min(max_len, max(len(s) for s in sequences))
    batch = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        sequence = sequence[:width]
        batch[row, : len(sequence)] = torch.from_numpy(sequence.astype(np.int64))
    return batch


def classification_batches(
    split: LabeledSplit, batch_size: int, max_len: int, generator: np.random.Generator | None = None,
    pad_id: int = PAD_ID,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled, length-bucketed batches when a generator is given; in order otherwise."""
    if generator is None:
        batches = [np.arange(i, min(i + batch_size, len(split))) for i in range(0, len(split), batch_size)]
    else:
        order = generator.permutation(len(split))
        lengths = split.lengths()
        bucket = batch_size * 50
        batches = []
        for begin in range(0, len(order), bucket):
            chunk = order[begin : begin + bucket]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
        batches = [batches[i] for i in generator.permutation(len(batches))]
    for indices in batches:
        ids = pad_batch([split.sequence(i) for i in indices], max_len, pad_id)
        yield ids, torch.from_numpy(split.labels[indices])


@torch.no_grad()
def predict(
    model: Classifier, split: LabeledSplit, batch_size: int, max_len: int, device: torch.device
) -> tuple[np.ndarray, float]:
    """Class probabilities for every example, and the mean cross-entropy loss."""
    model.eval()
    probabilities, total_loss = [], 0.0
    for ids, labels in classification_batches(split, batch_size, max_len, pad_id=model.base.config.pad_id):
        with autocast(device):
            logits = model(ids.to(device)).float()
        total_loss += float(F.cross_entropy(logits, labels.to(device), reduction="sum"))
        probabilities.append(torch.softmax(logits, dim=-1).cpu().numpy())
    return np.concatenate(probabilities), total_loss / len(split)


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


def finetune(
    model: Classifier,
    train: LabeledSplit,
    valid: LabeledSplit,
    params: FinetuneParams,
    device: torch.device,
    seed: int = 0,
    on_epoch: EpochCallback | None = None,
    desc: str = "finetune",
) -> FinetuneResult:
    model.to(device)
    set_backbone_frozen(model, params.freeze_backbone)
    groups = discriminative_param_groups(model, params.lr, params.head_lr_multiplier, params.layer_lr_decay)
    optimizer = make_optimizer(groups, params.lr, params.weight_decay)
    steps_per_epoch = -(-len(train) // params.batch_size)
    scheduler = warmup_cosine(optimizer, params.warmup_steps, steps_per_epoch * params.epochs)
    generator = np.random.default_rng(seed)
    result = FinetuneResult()
    start = time.perf_counter()
    for epoch in range(1, params.epochs + 1):
        model.train()
        if params.freeze_backbone:
            model.base.eval()  # a frozen backbone is a fixed feature extractor: no dropout noise
        loss_sum, correct, seen = 0.0, 0, 0
        epoch_start = time.perf_counter()
        progress = progress_bar(total=steps_per_epoch, desc=f"{desc} epoch {epoch}/{params.epochs}", unit="batch")
        for ids, labels in classification_batches(
            train, params.batch_size, params.max_len, generator, pad_id=model.base.config.pad_id
        ):
            ids, labels = ids.to(device), labels.to(device)
            with autocast(device):
                logits = model(ids).float()
            loss = F.cross_entropy(logits, labels)
            optimizer_step(loss, model, optimizer, scheduler, params.grad_clip)
            loss_sum += loss.item() * len(labels)
            correct += int((logits.argmax(-1) == labels).sum())
            seen += len(labels)
            progress.update(1)
            progress.set_postfix(loss=f"{loss_sum / seen:.3f}", acc=f"{correct / seen:.3f}", refresh=False)
        progress.close()
        probabilities, val_loss = predict(model, valid, params.batch_size * 2, params.max_len, device)
        val_accuracy = float((probabilities.argmax(-1) == valid.labels).mean())
        row = {
            "epoch": epoch,
            "train_loss": loss_sum / seen,
            "train_accuracy": correct / seen,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
        }
        result.history.append(row)
        result.epoch_seconds.append(round(time.perf_counter() - epoch_start, 2))
        if val_accuracy > result.best_val_accuracy:
            result.best_val_accuracy, result.best_epoch = val_accuracy, epoch
            result.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
        print(
            f"{desc} epoch {epoch}: train loss {row['train_loss']:.4f} acc {row['train_accuracy']:.4f} | "
            f"val loss {val_loss:.4f} acc {val_accuracy:.4f}",
            flush=True,
        )
        if on_epoch:
            on_epoch(row)
    result.seconds = time.perf_counter() - start
    return result
