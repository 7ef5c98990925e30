"""Stage pretrain: next-token pretraining of the Transformer LM (or loading `pretrain.init_from`), plus samples."""

import lmtransfer  # noqa: F401 - first: pins the CPU kernels, turns MLflow telemetry off
import mlflow

from lmtransfer.checkpoint import save_checkpoint
from lmtransfer.checkpoint_import import load_into_language_model, read_checkpoint_weights
from lmtransfer.config import load_params
from lmtransfer.generation import format_samples, generate_samples
from lmtransfer.input_files import resolve_input
from lmtransfer.io import write_json, write_text, write_tsv
from lmtransfer.model import LanguageModel, ModelConfig, count_parameters
from lmtransfer.paths import (
    PARAMS, PRETRAIN_SAMPLES, PRETRAIN_SUMMARY, PRETRAIN_TRAIN_LOG, PRETRAIN_VALID_LOG, PRETRAINED, TOKENIZED,
    timings_file,
)
from lmtransfer.pretrain import adapt_to_task, evaluate_imported, pretrain
from lmtransfer.resume import Snapshots, fingerprint
from lmtransfer.runtime import configure, environment_facts
from lmtransfer.stage import stage_main
from lmtransfer.tokenized import load_corpus, load_labeled_split, read_tokenized_meta
from lmtransfer.tokenizer import load_tokenizer
from lmtransfer.tracking import stage_run, tag_checkpoint


@stage_main("pretrain")
def main() -> None:
    params = load_params(PARAMS)
    meta = read_tokenized_meta(TOKENIZED)
    train_ids, valid_ids = load_corpus(TOKENIZED, "train"), load_corpus(TOKENIZED, "valid")
    tokenizer = load_tokenizer(TOKENIZED)
    device = configure(params.train)
    config = ModelConfig.from_params(params.model, meta["vocab_size"], meta["pad_id"])
    model = LanguageModel(config)
    weights = None
    if params.pretrain.init_from:  # checked before any work: a mismatch stops here with the params to change
        weights = read_checkpoint_weights(resolve_input(params.pretrain.init_from, "pretrain.init_from"))
        load_into_language_model(weights, model)
    sections = params.sections("model", "pretrain", "train")
    snapshots = Snapshots("pretrain", fingerprint("pretrain", sections, [TOKENIZED], device), params.train.resume_every)
    with stage_run("pretrain", sections):
        mlflow.set_tags({"device": str(device), "n_parameters": count_parameters(model)})
        if weights is not None:
            mlflow.set_tags({"init_from": params.pretrain.init_from, "init_layout": weights.layout})
            for note in weights.notes:
                print(f"pretrain: {note}")
            print(f"pretrain: loaded {params.pretrain.init_from} ({weights.layout} layout), no training")
            result = evaluate_imported(model, train_ids, valid_ids, params.pretrain, device)
        else:
            print(f"pretrain: {count_parameters(model):,} parameters on {device}, {train_ids.size:,} corpus tokens")
            result = pretrain(
                model, train_ids, valid_ids, params.pretrain, device, params.train.seed, params.train.log_every,
                log_metrics=mlflow.log_metrics, snapshots=snapshots,
            )
        adaptation = None
        if params.pretrain.adapt_epochs:
            train_texts, valid_texts = (load_labeled_split(TOKENIZED, name).text_stream(meta["eos_id"])
                                        for name in ("train", "valid"))
            print(f"pretrain: adapting to the task's texts: {params.pretrain.adapt_epochs} epochs over the "
                  f"{train_texts.size:,} tokens of the labeled train split (labels unused)")
            adaptation = adapt_to_task(
                model, train_texts, valid_texts, params.pretrain, device, params.train.seed,
                params.train.log_every, log_metrics=mlflow.log_metrics, first_step=result.steps, snapshots=snapshots,
            )
        phases = [("corpus", result)] + ([("task", adaptation)] if adaptation else [])
        train_log = [{**row, "phase": name} for name, phase in phases for row in phase.train_log]
        valid_log = [{**row, "phase": name} for name, phase in phases for row in phase.valid_log]
        samples = generate_samples(model, tokenizer, params.pretrain.prompts, params.pretrain.generate_tokens,
                                   params.pretrain.temperature, params.pretrain.top_k, device, params.train.seed)
        sample_text = format_samples(samples)
        summary = {
            "val_perplexity": result.valid_log[-1]["val_perplexity"],
            "val_loss": result.final_val_loss,
            "initial_val_loss": result.valid_log[0]["val_loss"],
            "steps": result.steps,
            "tokens_seen": result.tokens_seen,
        }
        if adaptation:
            summary.update({
                "task_initial_val_perplexity": adaptation.valid_log[0]["val_perplexity"],
                "task_val_perplexity": adaptation.valid_log[-1]["val_perplexity"],
                "adapt_steps": adaptation.steps,
                "adapt_tokens_seen": adaptation.tokens_seen,
            })
        summary.update({"n_parameters": count_parameters(model), **environment_facts()})
        seconds = sum(phase.seconds for _, phase in phases)
        timings = {"seconds": round(seconds, 2),
                   "tokens_per_second": round(sum(p.tokens_seen for _, p in phases) / max(seconds, 1e-9), 1),
                   "throughput": [row for _, phase in phases for row in phase.throughput]}
        extras = {"init_from": params.pretrain.init_from, "lm_head": weights.has_lm_head} if weights else {}
        save_checkpoint(PRETRAINED, model, "language_model", config, **extras)
        tag_checkpoint(PRETRAINED)
        write_tsv(PRETRAIN_TRAIN_LOG, train_log)
        write_tsv(PRETRAIN_VALID_LOG, valid_log)
        write_text(PRETRAIN_SAMPLES, sample_text)
        write_json(PRETRAIN_SUMMARY, summary)
        write_json(timings_file("pretrain"), timings)
        mlflow.log_metrics({f"final_{k}": float(v) for k, v in summary.items() if isinstance(v, (int, float))})
        mlflow.log_metrics({f"final_{k}": float(timings[k]) for k in ("seconds", "tokens_per_second")})
        mlflow.log_text(sample_text, "samples.txt")
        mlflow.log_artifact(str(PRETRAINED))
    snapshots.clear()
    print(sample_text, end="")
    print(f"pretrain: val loss {summary['val_loss']:.3f} (perplexity {summary['val_perplexity']:.1f}), "
          f"{timings['tokens_per_second']:.0f} tokens/s -> {PRETRAINED}")


if __name__ == "__main__":
    main()
