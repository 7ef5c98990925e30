"""Fine-tuning for classification, one loop for the pretrained and the scratch model: per epoch shuffled batches,
a clipped AdamW step each, then validation; the best epoch is kept, a snapshot per epoch lets a killed run resume."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch.nn import functional as F

from lmtransfer.classification.config import ClassificationParams, FinetuneParams
from lmtransfer.classification.inference import predict
from lmtransfer.classification.label_curve import repeats_for, train_subset
from lmtransfer.classification.mlflow_model import log_classifier
from lmtransfer.core.errors import TokenizerError
from lmtransfer.core.paths import TOKENIZED, finetuned_checkpoint
from lmtransfer.harness.progress import progress_bar
from lmtransfer.harness.tracking import log_metrics, log_run, stage_run
from lmtransfer.modeling.checkpoint import classifier_from_pretrained, save_checkpoint
from lmtransfer.modeling.model import Classifier, count_parameters
from lmtransfer.modeling.runtime import autocast, compiled, configure, environment_facts, to_device
from lmtransfer.tokens.batches import classification_batches
from lmtransfer.tokens.id_files import LabeledSplit, load_labeled_split, read_tokenized_meta
from lmtransfer.tokens.tokenizer import tokenizer_fingerprint
from lmtransfer.training import distributed
from lmtransfer.training.finetune_start import language_model_start, record_finetuned
from lmtransfer.training.loop import RunOptions, cpu_copy, optimizer_step
from lmtransfer.training.optim import make_optimizer, warmup_constant, warmup_cosine
from lmtransfer.training.resume import Snapshots, fingerprint
from lmtransfer.training.stage_args import FinetuneArgs


@dataclass
class FinetuneResult:
    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    best_val_accuracy: float = -1.0
    best_state: dict | None = None
    seconds: float = 0.0  # wall clock: reported apart from the results, which must not vary run to run
    epoch_seconds: list[float] = field(default_factory=list)


def discriminative_param_groups(model: Classifier, lr: float, head_lr_multiplier: float, layer_lr_decay: float):
    """Param groups from the head down (ULMFiT): head lr x multiplier, top layer lr, x decay per layer below,
    embedding last; one recipe for the pretrained and the scratch model."""
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
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    line = f"{desc}: {trainable:,} trainable of {count_parameters(model):,} parameters"
    if frozen:
        line += (" (finetune.freeze_backbone: the base is frozen in both variants, so the scratch model trains a "
                 "head on random features: the control for the pretrained model's head on learned ones)")
    return line


def finetune(model: Classifier, train: LabeledSplit, valid: LabeledSplit, params: FinetuneParams,
             options: RunOptions = RunOptions(desc="finetune")) -> FinetuneResult:
    """Train `finetune.epochs` epochs, each epoch's row to `options.log_metrics`; with `options.snapshots`, save
    after each epoch and resume from the last one saved."""
    refuse_padding_ids_in_texts(model.base.config.pad_id, train=train, valid=valid)
    model.to(options.device)
    set_backbone_frozen(model, params.freeze_backbone)
    groups = discriminative_param_groups(model, params.lr, params.head_lr_multiplier, params.layer_lr_decay)
    optimizer = make_optimizer(groups, params.lr, params.weight_decay)
    steps_per_epoch = -(-len(train) // params.batch_size)
    scheduler = (warmup_constant(optimizer, params.warmup_steps) if params.schedule == "constant"
                 else warmup_cosine(optimizer, params.warmup_steps, steps_per_epoch * params.epochs))
    order = np.random.default_rng(options.seed)  # draws each epoch's batches
    step = _step_function(model, options.device, options.compile_steps)
    print(describe_trainable(model, params.freeze_backbone, options.desc), flush=True)
    saved = options.snapshots.load("epochs", model, optimizer, scheduler) if options.snapshots else None
    result = FinetuneResult(**saved["result"]) if saved else FinetuneResult()
    if saved:
        order.bit_generator.state = saved["order"]
        print(f"{options.desc}: resumed from the snapshot after epoch {len(result.history)} of {params.epochs}")
    for epoch in range(len(result.history) + 1, params.epochs + 1):
        started = time.perf_counter()
        model.train()
        if params.freeze_backbone:
            model.base.eval()  # a frozen backbone is a fixed feature extractor: no dropout noise
        loss_sum, correct, seen = 0.0, 0, 0
        bar = progress_bar(total=steps_per_epoch, desc=f"{options.desc} epoch {epoch}/{params.epochs}", unit="batch")
        for batch in classification_batches(train, params.batch_size, params.max_len, model.base.config.pad_id,
                                            order, bucketed=params.batches == "bucketed"):
            ids, labels = to_device(batch, options.device)
            loss, measured = step(ids, labels)
            optimizer_step(loss, model, optimizer, scheduler, params.grad_clip)
            loss_sum += measured["loss"].item() * len(labels)
            correct += int(measured["correct"].round())
            seen += len(labels)
            bar.update()
            bar.set_postfix(loss=f"{loss_sum / seen:.3f}", acc=f"{correct / seen:.3f}", refresh=False)
        bar.close()
        probabilities, val_loss = predict(model, valid, params.batch_size * 2, params.max_len, options.device)
        row = {"epoch": epoch, "train_loss": loss_sum / seen, "train_accuracy": correct / seen, "val_loss": val_loss,
               "val_accuracy": float((probabilities.argmax(-1) == valid.labels).mean())}
        result.history.append(row)
        if row["val_accuracy"] > result.best_val_accuracy:
            result.best_val_accuracy, result.best_epoch, result.best_state = row["val_accuracy"], epoch, cpu_copy(model)
        print(f"{options.desc} epoch {epoch}: train loss {row['train_loss']:.4f} acc {row['train_accuracy']:.4f} | "
              f"val loss {row['val_loss']:.4f} acc {row['val_accuracy']:.4f}", flush=True)
        options.log_metrics({k: v for k, v in row.items() if k != "epoch"}, epoch)
        result.epoch_seconds.append(round(time.perf_counter() - started, 2))
        result.seconds += time.perf_counter() - started
        if options.snapshots:
            options.snapshots.save("epochs", model, optimizer, scheduler, result=asdict(result),
                                   order=order.bit_generator.state)
    return result


def refuse_padding_ids_in_texts(pad_id: int, **splits: LabeledSplit) -> None:
    """A text holding the padding id (a model built for another id space) would be masked as padding, silently."""
    for name, split in splits.items():
        if np.any(split.ids == pad_id):
            raise TokenizerError(f"the {name} texts hold the model's padding id {pad_id}: the model was built for "
                                 "another tokenizer's id space (its pad_id must be the tokenizer's)")


def _step_function(model: Classifier, device: torch.device, compile_steps: bool):
    """(ids, labels) -> (loss to backpropagate, the global batch's loss and number correct); each process's loss is
    weighted by its share of the texts, so the all-reduced gradient is the global batch's."""
    world = distributed.world()
    trainer = compiled(distributed.wrap(model, _scores, device), compile_steps)

    def step(ids: torch.Tensor, labels: torch.Tensor):
        total = len(labels)
        (ids, labels), present = distributed.my_rows([ids, labels], world)
        with autocast(device):
            scores = trainer(ids, labels)
        weight = present * len(labels) / total
        return scores["loss"] * weight * world.size, distributed.sum_over_ranks(
            {"loss": scores["loss"] * weight, "correct": scores["correct"] * present})

    return step


def _scores(model: Classifier, ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    logits = model(ids).float()
    return {"loss": F.cross_entropy(logits, labels), "correct": (logits.argmax(-1) == labels).sum()}


def run_finetune_stage(params: ClassificationParams, args: FinetuneArgs) -> None:
    """Fine-tune one variant from one pretraining run with one seed; rank 0 saves the best epoch and reports."""
    meta = read_tokenized_meta(TOKENIZED)
    train, valid = load_labeled_split(TOKENIZED, "train"), load_labeled_split(TOKENIZED, "valid")
    if args.labels is not None:  # the label curve: a subset, repeated to the full split's length
        repeats = repeats_for(len(train.labels), args.labels)
        train = train_subset(train, args.labels, params.finetune.label_seed, repeats)
    label_names = meta["label_names"]
    distributed.launch(params.train.nproc)  # train.nproc > 1: this command again, as N processes under torchrun
    start = language_model_start(params, meta, args)
    variant, stage = start.variant, start.stage
    device = distributed.start(params.train, configure(params.train, seed=start.draws))
    if start.payload:
        model = classifier_from_pretrained(start.payload, len(label_names), params.finetune.pooling,
                                           meta["vocab_size"], meta["pad_id"])
    else:
        model = Classifier(start.config, len(label_names), params.finetune.pooling)
    inputs = [TOKENIZED] + ([start.pretrained] if start.pretrained else [])
    snapshots = Snapshots(stage, fingerprint(stage, params.sections(*start.sections), inputs, device),
                          params.train.resume_every)
    with stage_run(f"finetune_{variant}", start.logged_params(params), upstream_run_id=start.upstream,
                   run_name=stage) as run:
        trainable = count_parameters(model.head) if params.finetune.freeze_backbone else count_parameters(model)
        log_run(tags={"variant": variant, "seed": start.seed, "pretrain_seed": start.pretrain_seed,
                      "device": str(device), "n_parameters": count_parameters(model),
                      "n_trainable_parameters": trainable, **({"labels": args.labels} if args.labels else {})},
                params={"seed": start.seed, "pretrain_seed": start.pretrain_seed, "n_train": len(train)})
        print(f"{stage}: {count_parameters(model):,} parameters on {device}, {len(train)} train / {len(valid)} valid")
        options = RunOptions(device, start.draws, stage, snapshots, log_metrics, compile_steps=params.train.compile)
        result = finetune(model, train, valid, params.finetune, options)
        if not run:  # None on ranks other than 0: they train, rank 0 reports
            return
        model.load_state_dict(result.best_state)
        checkpoint = finetuned_checkpoint(variant, start.run)
        save_checkpoint(checkpoint, model, "classifier", model.base.config, n_classes=len(label_names),
                        pooling=params.finetune.pooling, label_names=label_names, max_len=params.finetune.max_len,
                        variant=variant, seed=start.seed, pretrain_seed=start.pretrain_seed,
                        tokenizer_sha256=tokenizer_fingerprint(TOKENIZED))
        summary = {"best_val_accuracy": result.best_val_accuracy, "best_epoch": result.best_epoch,
                   "first_epoch_val_accuracy": result.history[0]["val_accuracy"],
                   "final_val_accuracy": result.history[-1]["val_accuracy"],
                   "final_train_accuracy": result.history[-1]["train_accuracy"], **environment_facts()}
        record_finetuned(start, checkpoint, result.history, summary,
                         {"seconds": round(result.seconds, 2), "epoch_seconds": result.epoch_seconds},
                         log_model=lambda path: log_classifier(path, TOKENIZED, label_names, f"{variant}-{start.run}",
                                                                {"best_val_accuracy": result.best_val_accuracy}))
    snapshots.clear()
    print(f"{stage}: best val accuracy {result.best_val_accuracy:.4f} at epoch {result.best_epoch} -> {checkpoint}")
