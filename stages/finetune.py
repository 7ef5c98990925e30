"""Stage finetune_pretrained@<seed> / finetune_scratch@<seed>: the same fine-tuning, two initialisations.

    python stages/finetune.py --init pretrained --seed 0   # base from models/pretrained.pt
    python stages/finetune.py --init scratch --seed 0      # same network, random weights

dvc.yaml runs one stage per variant and seed in `finetune.seeds`, so adding a seed
runs only that seed's two fine-tunes.
"""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

import mlflow

from lmtransfer.classification.config import load_params
from lmtransfer.classification.finetune import finetune
from lmtransfer.core.io import write_json, write_timings, write_tsv
from lmtransfer.core.paths import (
    PARAMS,
    PRETRAINED,
    TOKENIZED,
    finetune_epochs,
    finetune_summary,
    finetuned_checkpoint,
    timings_file,
)
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import log_metrics, stage_run, tag_checkpoint
from lmtransfer.modeling.checkpoint import classifier_from_pretrained, save_checkpoint
from lmtransfer.modeling.model import Classifier, count_parameters
from lmtransfer.modeling.runtime import configure, environment_facts
from lmtransfer.tokens.tokenized import load_labeled_split, read_tokenized_meta
from lmtransfer.tokens.tokenizer import tokenizer_fingerprint
from lmtransfer.training import distributed
from lmtransfer.training.finetune_args import finetune_stage_name, language_model_start
from lmtransfer.training.resume import Snapshots, fingerprint


@stage_main(finetune_stage_name)
def main() -> None:
    params = load_params(PARAMS)
    meta = read_tokenized_meta(TOKENIZED)
    train, valid = load_labeled_split(TOKENIZED, "train"), load_labeled_split(TOKENIZED, "valid")
    label_names = meta["label_names"]
    distributed.launch(params.train.nproc)  # train.nproc > 1: this command again, as N processes under torchrun
    start = language_model_start(params, meta)
    variant, seed, stage = start.variant, start.seed, start.stage
    device = distributed.start(params.train, configure(params.train, seed=seed))
    if start.payload:
        model = classifier_from_pretrained(
            start.payload, len(label_names), params.finetune.pooling, meta["vocab_size"], meta["pad_id"]
        )
    else:
        model = Classifier(start.config, len(label_names), params.finetune.pooling)
    sections, upstream = start.sections, start.upstream
    inputs = [TOKENIZED] + ([PRETRAINED] if start.payload else [])
    snapshots = Snapshots(stage, fingerprint(stage, params.sections(*sections), inputs, device),
                          params.train.resume_every)
    with stage_run(f"finetune_{variant}", start.logged_params(params), upstream_run_id=upstream, run_name=stage) as run:
        trainable = count_parameters(model.head) if params.finetune.freeze_backbone else count_parameters(model)
        if run:  # None on ranks other than 0: they train, rank 0 reports
            mlflow.set_tags({"variant": variant, "seed": seed, "device": str(device),
                             "n_parameters": count_parameters(model), "n_trainable_parameters": trainable})
            mlflow.log_param("seed", seed)
        print(f"{stage}: {count_parameters(model):,} parameters on {device}, {len(train)} train / {len(valid)} valid")
        result = finetune(
            model, train, valid, params.finetune, device, seed,
            on_epoch=lambda row: log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"]),
            desc=stage, snapshots=snapshots, compile_steps=params.train.compile,
        )
        if not run:
            return
        model.load_state_dict(result.best_state)
        checkpoint = finetuned_checkpoint(variant, seed)
        save_checkpoint(
            checkpoint, model, "classifier", model.base.config,
            n_classes=len(label_names), pooling=params.finetune.pooling, label_names=label_names,
            max_len=params.finetune.max_len, variant=variant, seed=seed,
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
        write_tsv(finetune_epochs(variant, seed), result.history)
        write_json(finetune_summary(variant, seed), summary)
        write_timings(timings_file(f"finetune_{variant}_seed{seed}"), {"seconds": round(result.seconds, 2),
                                                                    "epoch_seconds": result.epoch_seconds})
        mlflow.log_metrics({k: float(v) for k, v in summary.items() if isinstance(v, (int, float))})
        mlflow.log_metric("seconds", result.seconds)
        tag_checkpoint(checkpoint)
        mlflow.log_artifact(str(checkpoint))
    snapshots.clear()
    print(f"{stage}: best val accuracy {result.best_val_accuracy:.4f} at epoch {result.best_epoch} -> {checkpoint}")


if __name__ == "__main__":
    main()
