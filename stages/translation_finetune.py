"""Translation stage finetune_pretrained@<seed> / finetune_scratch@<seed>: the encoder–decoder from two starts.

    python ../stages/translation_finetune.py --init pretrained --seed 0   # warm start from models/pretrained.pt
    python ../stages/translation_finetune.py --init scratch --seed 0      # same network, random weights

Run from translation/ (translation/dvc.yaml does). Same recipe for both variants:
`finetune.*` of translation/params.yaml.
"""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

import mlflow

from lmtransfer.core.io import write_json, write_timings, write_tsv
from lmtransfer.core.paths import (
    PARAMS,
    PREPARED,
    TOKENIZED,
    finetune_epochs,
    finetune_summary,
    finetuned_checkpoint,
    timings_file,
)
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking import log_metrics, stage_run, tag_checkpoint
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.modeling.model import count_parameters
from lmtransfer.modeling.runtime import configure, environment_facts
from lmtransfer.tokens.tokenized import load_pair_split, read_tokenized_meta
from lmtransfer.tokens.tokenizer import load_tokenizer, tokenizer_fingerprint
from lmtransfer.training.finetune_args import finetune_stage_name, language_model_start
from lmtransfer.translation.config import load_translation_params
from lmtransfer.translation.data.parallel import read_pairs
from lmtransfer.translation.training import build_translation_model, finetune_translation


@stage_main(finetune_stage_name)
def main() -> None:
    params = load_translation_params(PARAMS)
    meta = read_tokenized_meta(TOKENIZED)
    tokenizer = load_tokenizer(TOKENIZED)
    train, valid = load_pair_split(TOKENIZED, "train"), load_pair_split(TOKENIZED, "valid")
    valid_references = list(read_pairs(PREPARED, "valid")["target"])
    start = language_model_start(params, meta)
    variant, seed, stage = start.variant, start.seed, start.stage
    if params.train.nproc > 1:
        print(f"{stage}: train.nproc={params.train.nproc} applies to pretraining; translation fine-tuning runs in "
              "one process")
    device = configure(params.train, seed=seed)
    lm_state = start.payload["state_dict"] if start.payload else None
    model, warm = build_translation_model(start.config, params.finetune, seed, lm_state)
    upstream = start.upstream
    with stage_run(f"finetune_{variant}", start.logged_params(params), upstream_run_id=upstream, run_name=stage):
        mlflow.set_tags({"variant": variant, "seed": seed, "device": str(device),
                         "n_parameters": count_parameters(model)})
        mlflow.log_param("seed", seed)
        if warm:
            print(f"{stage}: {len(warm.copied)} tensors from the pretrained language model, {len(warm.fresh)} fresh "
                  "(cross-attention and the norm after it)")
            mlflow.log_dict({"copied": warm.copied, "fresh": warm.fresh}, "warm_start.json")

        def on_epoch(row: dict, examples: list[str]) -> None:
            log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
            lines = [f"{text}\t{translation}" for text, translation in zip(params.finetune.examples, examples)]
            mlflow.log_text("\n".join(lines) + "\n", f"examples/epoch{row['epoch']}.txt")

        result = finetune_translation(model, train, valid, valid_references, tokenizer, params.finetune, device,
                                      seed, on_epoch=on_epoch, desc=stage)
        model.load_state_dict(result.best_state)
        checkpoint = finetuned_checkpoint(variant, seed)
        save_checkpoint(checkpoint, model, "translation", model.config, variant=variant, seed=seed,
                        tokenizer_sha256=tokenizer_fingerprint(TOKENIZED))
        summary = {"best_val_bleu": result.best_val_bleu, "best_epoch": result.best_epoch,
                   "first_epoch_val_bleu": result.history[0]["val_bleu"],
                   "final_val_loss": result.history[-1]["val_loss"], "pairs_left_out": result.left_out,
                   **environment_facts()}
        write_tsv(finetune_epochs(variant, seed), result.history)
        write_json(finetune_summary(variant, seed), summary)
        write_timings(timings_file(f"finetune_{variant}_seed{seed}"),
                   {"seconds": round(result.seconds, 2), "tokens_per_second": round(result.tokens_per_second)})
        mlflow.log_metrics({k: float(v) for k, v in summary.items() if isinstance(v, (int, float))})
        mlflow.log_metrics({"seconds": result.seconds, "tokens_per_second": result.tokens_per_second})
        tag_checkpoint(checkpoint)
        mlflow.log_artifact(str(checkpoint))
    print(f"{stage}: best validation BLEU {result.best_val_bleu:.2f} at epoch {result.best_epoch} -> {checkpoint} "
          f"({result.tokens_per_second:,.0f} tokens/s)")


if __name__ == "__main__":
    main()
