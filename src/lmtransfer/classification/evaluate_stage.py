"""The evaluate stage: every fine-tuned run of both variants on the test split, the gap and its uncertainty."""

from __future__ import annotations

from lmtransfer.classification.config import ClassificationParams
from lmtransfer.classification.evaluate import (
    SeedResult,
    evaluate_classifier,
    headline_metrics,
    mean_curves,
    pooled_confusion,
    pretraining_report,
    report_lines,
    transfer_report,
)
from lmtransfer.classification.label_curve import LABEL_CURVE, baseline_at_size, curve_rows
from lmtransfer.classification.label_subsets import label_run
from lmtransfer.core.io import read_json, read_tsv, require_file, write_json, write_text, write_tsv
from lmtransfer.core.paths import (
    BASELINE_METRICS,
    EVALUATE_DETAILS,
    EVALUATE_REPORT,
    HEADLINE,
    PREPARED,
    TOKENIZED,
    VARIANTS,
    PretrainOutputs,
    finetune_epochs,
    finetune_run,
    finetuned_checkpoint,
    predictions_file,
)
from lmtransfer.data.prepared import SPLITS, read_split
from lmtransfer.harness.tracking import (
    log_file,
    log_run,
    log_to_pipeline,
    params_hash,
    register_champion,
    run_that_wrote,
    runs_that_wrote,
    stage_run,
)
from lmtransfer.modeling.checkpoint import load_checkpoint
from lmtransfer.modeling.runtime import select_device, use_share_of_cores
from lmtransfer.reporting.finetuned import finetuned_checkpoints, run_grid
from lmtransfer.tokens.id_files import load_labeled_split
from lmtransfer.training.resume import clear_finished_snapshots


def run_evaluate_stage(params: ClassificationParams) -> None:
    """Score every fine-tuned checkpoint on test; write the report, the headline, confusions, curves, predictions,
    and the label curve (every size of `finetune.label_sizes`, then the full split)."""
    grid = run_grid(params.pretrain.seeds, params.finetune.seeds)
    test = load_labeled_split(TOKENIZED, "test")
    baseline = read_json(require_file(BASELINE_METRICS, "baseline results"))
    pretraining = pretraining_report({seed: read_json(require_file(PretrainOutputs(seed).summary, "pretraining results"))
                                      for seed in params.pretrain.seeds})
    cells = {finetune_run(seed, pretrain_seed): (pretrain_seed, seed) for pretrain_seed, seed in grid}
    checkpoints = finetuned_checkpoints(list(cells))
    sized = {size: finetuned_checkpoints([label_run(run, size) for run in cells]) for size in params.finetune.label_sizes}
    upstream = runs_that_wrote(checkpoints.values())
    device = select_device("auto")
    use_share_of_cores()
    with stage_run("evaluate", params.sections("evaluate"), upstream_run_id=upstream,
                   clear_snapshots=clear_finished_snapshots):
        log_run(params={"pretrain.seeds": params.pretrain.seeds, "finetune.seeds": params.finetune.seeds,
                        "finetune.label_sizes": params.finetune.label_sizes})
        results, prediction_rows = _score(checkpoints, cells, test, params, device, log_steps=True)
        confusion = {variant: pooled_confusion(runs) for variant, runs in results.items()}
        report = transfer_report(results["pretrained"], results["scratch"], baseline, params.evaluate, pretraining)
        headline = headline_metrics(report)
        write_json(EVALUATE_REPORT, report)
        write_json(HEADLINE, headline)
        write_json(EVALUATE_DETAILS / "confusion.json", confusion)
        write_tsv(EVALUATE_DETAILS / "curves.tsv", mean_curves(results, baseline["valid_accuracy"]))
        for variant, rows in prediction_rows.items():
            write_text(predictions_file(variant), "\n".join(rows) + "\n")
        curve = _label_curve(sized, cells, test, params, device, pretraining, report)
        write_tsv(LABEL_CURVE, curve)
        log_run(metrics={**{f"gap_{k}": v for k, v in report["gap"].items() if not isinstance(v, dict)},
                         **{f"gap_share_{k}": v for k, v in report["gap"]["share"].items()},
                         **{f"{v}_{k}": report[v][k] for v in VARIANTS
                            for k in ("accuracy_mean", "accuracy_std", "first_epoch_val_accuracy_mean")},
                         "baseline_accuracy": report["baseline"]["accuracy"]})
        for row in curve[:-1]:
            log_run(metrics={f"labels_{key}": row[key] for key in ("pretrained", "scratch", "gap", "baseline")},
                    step=int(row["labels"]))
        log_file(report, "evaluate.json")
        log_to_pipeline(headline)
        register_best_pretrained(params)
    print("\n".join(f"evaluate: {line}" for line in report_lines(report)))
    for row in curve[:-1]:
        print(f"evaluate: {row['labels']} labels: pretrained {row['pretrained']:.4f}, scratch {row['scratch']:.4f}, "
              f"gap {row['gap']:+.4f} [{row['gap_low']:+.4f}, {row['gap_high']:+.4f}], TF-IDF {row['baseline']:.4f}")


def register_best_pretrained(params: ClassificationParams) -> None:
    """The pretrained fine-tune with the best validation accuracy (test never chooses) into the Model Registry, with
    the gap and the params' hash; from evaluate's files, so `lmtransfer register` can do it when DVC skips evaluate."""
    runs = [finetune_run(seed, pretrain_seed) for pretrain_seed, seed in run_grid(params.pretrain.seeds,
                                                                                 params.finetune.seeds)]
    validation = {run: max(float(row["val_accuracy"]) for row in read_tsv(require_file(
        finetune_epochs("pretrained", run), "fine-tuning metrics"))) for run in runs}
    best = max(runs, key=validation.get)  # the first of equals
    headline = read_json(require_file(HEADLINE, "the evaluate stage's headline"))
    path = require_file(finetuned_checkpoint("pretrained", best), "fine-tuned pretrained model")
    made_by = params.sections("data", "tokenizer", "model", "pretrain", "finetune", "train")
    register_champion("classification", run_that_wrote(path), path, {
        "run": best, "val_accuracy": f"{validation[best]:.6f}",
        **{key: f"{headline[key]:.6f}" for key in ("gap", "gap_low", "gap_high")}, "params_sha256": params_hash(made_by),
    })


def _score(checkpoints: dict, cells: dict, test, params: ClassificationParams, device, log_steps: bool = False):
    """Every checkpoint ((variant, run) -> path) on test: per variant its results, and `run,actual,predicted` rows."""
    results: dict[str, list[SeedResult]] = {v: [] for v in VARIANTS}
    prediction_rows = {v: ["run,actual,predicted"] for v in VARIANTS}
    runs = list(cells)
    for step, ((variant, run), path) in enumerate(checkpoints.items()):
        payload = load_checkpoint(path, expected_kind="classifier")
        metrics, predicted = evaluate_classifier(payload, test, params.evaluate.batch_size, device)
        epochs = read_tsv(require_file(finetune_epochs(variant, run), "fine-tuning metrics"))
        history = [{key: float(value) for key, value in row.items()} for row in epochs]
        cell = cells[runs[step % len(runs)]]
        results[variant].append(SeedResult(*cell, metrics, predicted == test.labels, history))
        names = payload["label_names"]
        prediction_rows[variant] += [f"{run},{names[a]},{names[p]}" for a, p in zip(test.labels, predicted)]
        if log_steps:
            log_run(metrics={f"{variant}_test_accuracy": metrics["accuracy"],
                             f"{variant}_test_macro_f1": metrics["macro_f1"]}, step=step % len(cells))
    return results, prediction_rows


def _label_curve(sized: dict, cells: dict, test, params: ClassificationParams, device, pretraining: dict,
                 full: dict) -> list[dict]:
    """One row per size of `finetune.label_sizes` (its runs' report, TF-IDF on the same subset), then `full`'s."""
    reports = {}
    if sized:
        splits = {name: read_split(PREPARED, name) for name in SPLITS}
        texts = {name: split["text"].tolist() for name, split in splits.items()}
        labels = {name: split["label"].to_numpy() for name, split in splits.items()}
        for size, checkpoints in sized.items():
            results, _ = _score(checkpoints, cells, test, params, device)
            baseline = baseline_at_size(texts, labels, size, params.finetune.label_seed, params.baseline)
            report = transfer_report(results["pretrained"], results["scratch"], baseline, params.evaluate, pretraining)
            reports[str(size)] = {**report, "n_train": size}
    n_train = len(load_labeled_split(TOKENIZED, "train"))
    return curve_rows({**reports, "all": {**full, "n_train": n_train}})
