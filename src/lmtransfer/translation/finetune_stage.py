"""The translation pipeline's finetune_pretrained@<p>-<seed> / finetune_scratch@<p>-<seed> stage: the encoder–decoder from two
starts, once translation/params.yaml is read. The stage script calls `run_finetune_stage` alone."""

from __future__ import annotations

from lmtransfer.core.paths import PREPARED, TOKENIZED, finetuned_checkpoint
from lmtransfer.harness.tracking import log_file, log_metrics, log_run, stage_run
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.modeling.model import count_parameters
from lmtransfer.modeling.runtime import configure, environment_facts
from lmtransfer.tokens.id_files import load_pair_split, read_tokenized_meta
from lmtransfer.tokens.tokenizer import load_tokenizer, tokenizer_fingerprint
from lmtransfer.training.finetune_start import language_model_start, record_finetuned
from lmtransfer.training.loop import RunOptions
from lmtransfer.training.resume import Snapshots, fingerprint
from lmtransfer.training.stage_args import FinetuneArgs
from lmtransfer.translation.config import TranslationParams
from lmtransfer.translation.data.parallel import read_pairs
from lmtransfer.translation.mlflow_model import log_translator
from lmtransfer.translation.training import TranslationPairs, build_translation_model, finetune_translation


def run_finetune_stage(params: TranslationParams, args: FinetuneArgs) -> None:
    """Fine-tune one variant with one seed (`--init`, `--seed`): the best epoch's weights, curves and examples."""
    meta = read_tokenized_meta(TOKENIZED)
    tokenizer = load_tokenizer(TOKENIZED)
    train, valid = load_pair_split(TOKENIZED, "train"), load_pair_split(TOKENIZED, "valid")
    valid_references = list(read_pairs(PREPARED, "valid")["target"])
    start = language_model_start(params, meta, args)
    variant, seed, stage = start.variant, start.seed, start.stage
    if params.train.nproc > 1:
        print(f"{stage}: train.nproc={params.train.nproc} applies to pretraining; translation fine-tuning runs in "
              "one process")
    device = configure(params.train, seed=start.draws)
    lm_state = start.payload["state_dict"] if start.payload else None
    model, warm = build_translation_model(start.config, params.finetune, start.draws, lm_state)
    inputs = [PREPARED, TOKENIZED] + ([start.pretrained] if start.pretrained else [])
    snapshots = Snapshots(stage, fingerprint(stage, params.sections(*start.sections), inputs, device),
                          params.train.resume_every)
    with stage_run(f"finetune_{variant}", start.logged_params(params), upstream_run_id=start.upstream,
                   run_name=stage):
        log_run(tags={"variant": variant, "seed": seed, "pretrain_seed": start.pretrain_seed, "device": str(device),
                      "n_parameters": count_parameters(model)},
                params={"seed": seed, "pretrain_seed": start.pretrain_seed})
        if warm:
            print(f"{stage}: {len(warm.copied)} tensors from the pretrained language model, {len(warm.fresh)} fresh "
                  "(cross-attention and the norm after it)")
            log_file({"copied": warm.copied, "fresh": warm.fresh}, "warm_start.json")

        pairs = TranslationPairs(train, valid, valid_references, tokenizer)
        result = finetune_translation(model, pairs, params.finetune, RunOptions(device, start.draws, stage, snapshots,
                                                                                  log_metrics))
        for epoch, examples in enumerate(result.examples, 1):
            lines = [f"{text}\t{translation}" for text, translation in zip(params.finetune.examples, examples)]
            log_file("\n".join(lines) + "\n", f"examples/epoch{epoch}.txt")
        model.load_state_dict(result.best_state)
        checkpoint = finetuned_checkpoint(variant, start.run)
        save_checkpoint(checkpoint, model, "translation", model.config, variant=variant, seed=seed,
                        pretrain_seed=start.pretrain_seed,
                        tokenizer_sha256=tokenizer_fingerprint(TOKENIZED))
        summary = {"best_val_bleu": result.best_val_bleu, "best_epoch": result.best_epoch,
                   "first_epoch_val_bleu": result.history[0]["val_bleu"],
                   "final_val_loss": result.history[-1]["val_loss"], "pairs_left_out": result.left_out,
                   **environment_facts()}
        record_finetuned(start, checkpoint, result.history, summary,
                         {"seconds": round(result.seconds, 2), "tokens_per_second": round(result.tokens_per_second)},
                         log_model=lambda path: log_translator(path, TOKENIZED))
    snapshots.clear()
    print(f"{stage}: best validation BLEU {result.best_val_bleu:.2f} at epoch {result.best_epoch} -> {checkpoint} "
          f"({result.tokens_per_second:,.0f} tokens/s)")
