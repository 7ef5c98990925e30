"""Stage finetune_pretrained / finetune_scratch: the same fine-tuning, two initialisations.

    python stages/finetune.py --init pretrained   # base from models/pretrained.pt
    python stages/finetune.py --init scratch      # same network, random weights
"""

import argparse

import mlflow

from lmtransfer.checkpoint import classifier_from_pretrained, load_checkpoint, save_checkpoint
from lmtransfer.config import load_params
from lmtransfer.finetune import finetune
from lmtransfer.io import read_json, require_file, write_json, write_tsv
from lmtransfer.model import Classifier, ModelConfig, count_parameters
from lmtransfer.paths import PARAMS, PRETRAINED, TOKENIZED, finetune_epochs, finetune_metrics, finetuned_checkpoint
from lmtransfer.runtime import configure
from lmtransfer.stage import stage_main
from lmtransfer.tokenizer import LabeledSplit
from lmtransfer.tracking import stage_run


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--init", choices=["pretrained", "scratch"], required=True)
    return parser.parse_args()


@stage_main("finetune")
def main() -> None:
    variant = parse_args().init
    params = load_params(PARAMS)
    meta = read_json(require_file(TOKENIZED / "meta.json", "tokenized data"))
    train, valid = LabeledSplit.load(TOKENIZED, "train"), LabeledSplit.load(TOKENIZED, "valid")
    label_names = meta["label_names"]
    device = configure(params.train)
    if variant == "pretrained":
        payload = load_checkpoint(PRETRAINED, expected_kind="language_model")
        model = classifier_from_pretrained(
            payload, len(label_names), params.finetune.pooling, meta["vocab_size"], meta["pad_id"]
        )
        sections, upstream = ("finetune", "train"), payload.get("mlflow_run_id")
    else:
        config = ModelConfig(vocab_size=meta["vocab_size"], pad_id=meta["pad_id"], **params.model.model_dump())
        model = Classifier(config, len(label_names), params.finetune.pooling)
        sections, upstream = ("model", "finetune", "train"), None
    stage = f"finetune_{variant}"
    with stage_run(stage, params.sections(*sections), upstream_run_id=upstream) as run:
        mlflow.set_tags({"variant": variant, "device": str(device), "n_parameters": count_parameters(model)})
        print(f"{stage}: {count_parameters(model):,} parameters on {device}, {len(train)} train / {len(valid)} valid")
        result = finetune(
            model, train, valid, params.finetune, device, params.train.seed,
            on_epoch=lambda row: mlflow.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"]),
            desc=stage,
        )
        model.load_state_dict(result.best_state)
        checkpoint = finetuned_checkpoint(variant)
        save_checkpoint(
            checkpoint, model, "classifier", model.base.config,
            n_classes=len(label_names), pooling=params.finetune.pooling, label_names=label_names,
            max_len=params.finetune.max_len, variant=variant, mlflow_run_id=run.info.run_id,
            upstream_run_id=upstream or "",
        )
        summary = {
            "best_val_accuracy": result.best_val_accuracy,
            "best_epoch": result.best_epoch,
            "first_epoch_val_accuracy": result.history[0]["val_accuracy"],
            "final_val_accuracy": result.history[-1]["val_accuracy"],
            "final_train_accuracy": result.history[-1]["train_accuracy"],
            "seconds": round(result.seconds, 2),
        }
        write_tsv(finetune_epochs(variant), result.history)
        write_json(finetune_metrics(variant), summary)
        mlflow.log_metrics({k: float(v) for k, v in summary.items()})
        mlflow.log_artifact(str(checkpoint))
    print(f"{stage}: best val accuracy {result.best_val_accuracy:.4f} at epoch {result.best_epoch} -> {checkpoint}")


if __name__ == "__main__":
    main()
