"""The pretrain stage of either task: train the language model (or load `pretrain.init_from`), then write the
checkpoint, the curves, the samples and the summary."""

from __future__ import annotations

from lmtransfer.core.config import PipelineParams
from lmtransfer.core.io import write_json, write_text, write_timings, write_tsv
from lmtransfer.core.paths import TOKENIZED, TOKENIZED_CORPUS, PretrainOutputs, timings_file
from lmtransfer.data.input_files import resolve_input
from lmtransfer.harness.tracking import log_checkpoint, log_file, log_metrics, log_run, stage_run
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.modeling.model import ModelConfig, count_parameters
from lmtransfer.modeling.runtime import configure, environment_facts
from lmtransfer.pretraining.checkpoint_import import load_into_language_model, read_checkpoint_weights
from lmtransfer.pretraining.generation import pretraining_samples
from lmtransfer.pretraining.objectives import Objective
from lmtransfer.pretraining.training import Phases, adapt_to_task, evaluate_imported, pretrain
from lmtransfer.tokens.id_files import load_corpus, load_labeled_split, read_tokenized_meta
from lmtransfer.tokens.tokenizer import load_tokenizer, tokenizer_fingerprint
from lmtransfer.training import distributed
from lmtransfer.training.loop import RunOptions
from lmtransfer.training.resume import Snapshots, fingerprint


def run_pretrain_stage(params: PipelineParams, seed: int, outputs: PretrainOutputs) -> None:
    """One pretraining run whose every random draw comes from `seed`, written to `outputs`."""
    meta = read_tokenized_meta(TOKENIZED)
    tokenizer = load_tokenizer(TOKENIZED)
    objective = Objective.from_params(params.pretrain, meta)  # before any work: mlm needs a <mask> token
    distributed.launch(params.train.nproc)  # train.nproc > 1: this command again, as N processes under torchrun
    device = distributed.start(params.train, configure(params.train, seed))
    config = ModelConfig.from_params(params.model, meta["vocab_size"], meta["pad_id"], params.causal_attention)
    model = objective.build_model(config)
    weights = None
    if params.pretrain.init_from:  # checked before any work: a mismatch stops here with the params to change
        weights = read_checkpoint_weights(resolve_input(params.pretrain.init_from, "pretrain.init_from"))
        weights.check_tokenizer(tokenizer_fingerprint(TOKENIZED))
        load_into_language_model(weights, model)
    sections, stage = params.sections("model", "pretrain", "train"), outputs.stage
    snapshots = Snapshots(stage, fingerprint(stage, sections, [TOKENIZED, TOKENIZED_CORPUS], device),
                          params.train.resume_every)
    options = RunOptions(device, seed, stage, snapshots, log_metrics, params.train.log_every, params.train.compile)
    with stage_run("pretrain", sections, run_name=stage) as run:  # None on ranks other than 0: they train, rank 0 reports
        if run:
            log_run(tags={"device": str(device), "n_parameters": count_parameters(model), "seed": seed},
                    params={"seed": seed})
        phases = _train_phases(model, params, meta, options, objective, weights)
        if not run:
            return
        summary, timings, sample_text = _write_outputs(model, params, phases, options, objective, weights, outputs,
                                                         tokenizer, meta)
    snapshots.clear()
    print(sample_text, end="")
    print(f"{stage}: val loss {summary['val_loss']:.3f} (perplexity {summary['val_perplexity']:.1f}), "
          f"{timings['tokens_per_second']:.0f} tokens/s -> {outputs.checkpoint}")


def _train_phases(model, params: PipelineParams, meta: dict, options: RunOptions, objective: Objective,
                  weights) -> Phases:
    """The corpus phase (or the loaded checkpoint's measurements), then the adaptation to the task's texts."""
    train_ids, valid_ids = load_corpus(TOKENIZED, "train"), load_corpus(TOKENIZED, "valid")
    stage = options.desc
    if weights is not None:
        for note in weights.notes:
            print(f"{stage}: {note}")
        print(f"{stage}: loaded {params.pretrain.init_from} ({weights.layout} layout), no training")
        result = evaluate_imported(model, train_ids, valid_ids, params.pretrain, options.device, objective)
    else:
        print(f"{stage}: {count_parameters(model):,} parameters on {options.device}, {train_ids.size:,} corpus "
              f"tokens, objective {objective.name}{' + next-sentence prediction' if objective.next_sentence else ''} "
              f"({model.base.config.attention} attention)")
        result = pretrain(model, train_ids, valid_ids, params.pretrain, options, objective)
    phases = [("corpus", result)]
    if params.pretrain.adapt_epochs:
        train_texts, valid_texts = (load_labeled_split(TOKENIZED, name).text_stream(meta["eos_id"])
                                    for name in ("train", "valid"))
        print(f"{stage}: adapting to the task's texts: {params.pretrain.adapt_epochs} epochs over the "
              f"{train_texts.size:,} tokens of the labeled train split (labels unused)")
        phases.append(("task", adapt_to_task(model, train_texts, valid_texts, params.pretrain, options, objective,
                                             first_step=result.steps)))
    return phases


def _write_outputs(model, params: PipelineParams, phases: Phases, options: RunOptions, objective: Objective, weights,
                   outputs: PretrainOutputs, tokenizer, meta: dict) -> tuple[dict, dict, str]:
    """The checkpoint, curves (rows tagged with their phase), samples, summary and timings; the run's final metrics."""
    logs = []
    for which in ("train_log", "valid_log"):
        rows = [{**row, "phase": name} for name, phase in phases for row in getattr(phase, which)]
        columns = list(dict.fromkeys(key for row in rows for key in row if key != "phase")) + ["phase"]
        logs.append([{key: row.get(key, "") for key in columns} for row in rows])
    sample_text = pretraining_samples(model, tokenizer, params.pretrain, objective.name, meta.get("mask_id"),
                                      options.device, options.seed)
    corpus = phases[0][1]
    summary = {"objective": objective.name, "next_sentence": objective.next_sentence,
               "val_perplexity": corpus.valid_log[-1]["val_perplexity"], "val_loss": corpus.final_val_loss,
               "initial_val_loss": corpus.valid_log[0]["val_loss"], "steps": corpus.steps,
               "tokens_seen": corpus.tokens_seen,
               **{key: value for key, value in corpus.valid_log[-1].items() if key.startswith(("val_masked", "val_nsp"))}}
    if len(phases) > 1:
        task = phases[1][1]
        summary.update(task_initial_val_perplexity=task.valid_log[0]["val_perplexity"],
                       task_val_perplexity=task.valid_log[-1]["val_perplexity"], adapt_steps=task.steps,
                       adapt_tokens_seen=task.tokens_seen)
    summary.update(n_parameters=count_parameters(model), **environment_facts())
    seconds = sum(phase.seconds for _, phase in phases)
    timings = {"seconds": round(seconds, 2),
               "tokens_per_second": round(sum(p.tokens_seen for _, p in phases) / max(seconds, 1e-9), 1),
               "throughput": [row for _, phase in phases for row in phase.throughput]}
    extras = {"init_from": params.pretrain.init_from, "lm_head": weights.has_lm_head} if weights else {}
    if weights:
        log_run(tags={"init_from": params.pretrain.init_from, "init_layout": weights.layout})
    save_checkpoint(outputs.checkpoint, model, "language_model", model.base.config, **objective.checkpoint_fields(),
                    **extras, tokenizer_sha256=tokenizer_fingerprint(TOKENIZED))
    write_tsv(outputs.train_log, logs[0])
    write_tsv(outputs.valid_log, logs[1])
    write_text(outputs.samples, sample_text)
    write_json(outputs.summary, summary)
    write_timings(timings_file(outputs.stage), timings)
    log_run(metrics={**{f"final_{k}": v for k, v in summary.items() if not isinstance(v, bool)},
                     **{f"final_{k}": timings[k] for k in ("seconds", "tokens_per_second")}})
    log_file(sample_text, "samples.txt")
    log_checkpoint(outputs.checkpoint)
    return summary, timings, sample_text
