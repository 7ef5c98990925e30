"""The finetune_pretrained / finetune_scratch stages: the same fine-tuning from two starts."""

from __future__ import annotations

from lmtransfer.classification.config import ClassificationParams
from lmtransfer.classification.finetune import finetune
from lmtransfer.classification.label_subsets import repeats_for, train_subset
from lmtransfer.classification.mlflow_model import log_classifier
from lmtransfer.core.paths import TOKENIZED, finetuned_checkpoint
from lmtransfer.harness.tracking import log_metrics, log_run, stage_run
from lmtransfer.modeling.checkpoint import classifier_from_pretrained, save_checkpoint
from lmtransfer.modeling.model import Classifier, count_parameters
from lmtransfer.modeling.runtime import configure, environment_facts
from lmtransfer.tokens.id_files import load_labeled_split, read_tokenized_meta
from lmtransfer.tokens.tokenizer import tokenizer_fingerprint
from lmtransfer.training import distributed
from lmtransfer.training.finetune_start import language_model_start, record_finetuned
from lmtransfer.training.loop import RunOptions
from lmtransfer.training.resume import Snapshots, fingerprint
from lmtransfer.training.stage_args import FinetuneArgs


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
    variant, seed, stage = start.variant, start.draws, start.stage
    device = distributed.start(params.train, configure(params.train, seed=seed))
    if start.payload:
        model = classifier_from_pretrained(
            start.payload, len(label_names), params.finetune.pooling, meta["vocab_size"], meta["pad_id"]
        )
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
        options = RunOptions(device, seed, stage, snapshots, log_metrics, compile_steps=params.train.compile)
        result = finetune(model, train, valid, params.finetune, options)
        if not run:  # None on ranks other than 0: they train, rank 0 reports
            return
        model.load_state_dict(result.best_state)
        checkpoint = finetuned_checkpoint(variant, start.run)
        save_checkpoint(
            checkpoint, model, "classifier", model.base.config,
            n_classes=len(label_names), pooling=params.finetune.pooling, label_names=label_names,
            max_len=params.finetune.max_len, variant=variant, seed=start.seed, pretrain_seed=start.pretrain_seed,
            tokenizer_sha256=tokenizer_fingerprint(TOKENIZED),
        )
        summary = {
            "best_val_accuracy": result.best_val_accuracy,
            "best_epoch": result.best_epoch,
            "first_epoch_val_accuracy": result.history[0]["val_accuracy"],
            "final_val_accuracy": result.history[-1]["val_accuracy"],
            "final_train_accuracy": result.history[-1]["train_accuracy"],
            **environment_facts(),
        }
        record_finetuned(start, checkpoint, result.history, summary,
                         {"seconds": round(result.seconds, 2), "epoch_seconds": result.epoch_seconds},
                         log_model=lambda path: log_classifier(path, TOKENIZED, label_names))
    snapshots.clear()
    print(f"{stage}: best val accuracy {result.best_val_accuracy:.4f} at epoch {result.best_epoch} -> {checkpoint}")
