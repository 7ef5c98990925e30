"""Test-set evaluation: every fine-tuned run of both variants and the transfer gap with a 95% interval and p-value
that resample pretraining runs, fine-tuning seeds and test examples together (one run's gap can be noise)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lmtransfer.classification.config import BaselineParams, ClassificationParams, EvaluateParams
from lmtransfer.classification.inference import predict
from lmtransfer.classification.label_curve import LABEL_CURVE, label_run, label_subset
from lmtransfer.classification.metrics import accuracy, confusion_matrix, macro_f1, per_class_f1
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
    log_model_metrics,
    log_run,
    log_to_pipeline,
    params_hash,
    register_champion,
    run_that_wrote,
    runs_that_wrote,
    show_answer,
    stage_run,
)
from lmtransfer.modeling.checkpoint import build_classifier, load_checkpoint
from lmtransfer.modeling.runtime import select_device, use_share_of_cores
from lmtransfer.reporting.finetuned import finetuned_checkpoints, run_grid
from lmtransfer.reporting.statistics import gap_uncertainty, summarize
from lmtransfer.tokens.id_files import load_labeled_split
from lmtransfer.training.resume import clear_finished_snapshots


@dataclass
class SeedResult:
    """One fine-tuned model (pretraining run, fine-tuning seed) on the test split, and its fine-tuning history."""

    pretrain_seed: int
    seed: int
    metrics: dict
    correct: np.ndarray  # bool per test example
    epochs: list[dict[str, float]]  # epoch, train/val loss and accuracy

    @property
    def run(self) -> str:
        return finetune_run(self.seed, self.pretrain_seed)


def variant_report(results: list[SeedResult]) -> dict:
    """Mean, std and per-seed values of the test scores and of validation accuracy per epoch."""
    report: dict = {}
    curves = np.array([[row["val_accuracy"] for row in r.epochs] for r in results])
    values = {"accuracy": [r.metrics["accuracy"] for r in results], "macro_f1": [r.metrics["macro_f1"] for r in results],
              "first_epoch_val_accuracy": list(curves[:, 0])}
    for key, numbers in values.items():
        stats = summarize(numbers)
        report.update({f"{key}_mean": stats["mean"], f"{key}_std": stats["std"], f"{key}_per_seed": stats["per_seed"]})
    report["val_accuracy_mean_per_epoch"] = [float(v) for v in curves.mean(axis=0)]
    report["val_accuracy_std_per_epoch"] = [float(v) for v in (curves.std(axis=0, ddof=1) if len(results) > 1
                                                               else np.zeros(curves.shape[1]))]
    names = list(results[0].metrics["f1_per_class"])
    report["f1_per_class_mean"] = {n: float(np.mean([r.metrics["f1_per_class"][n] for r in results])) for n in names}
    report["loss_mean"] = float(np.mean([r.metrics["loss"] for r in results]))
    report["runs"] = [r.run for r in results]
    return report


def mean_curves(results: dict[str, list[SeedResult]], baseline_valid_accuracy: float) -> list[dict[str, float]]:
    """Per epoch, each variant's mean over seeds: the table `dvc plots` draws."""
    n_epochs = min(len(r.epochs) for runs in results.values() for r in runs)
    rows = []
    for epoch in range(n_epochs):
        row: dict[str, float] = {"epoch": epoch + 1}
        for key in ("val_accuracy", "train_loss", "val_loss", "train_accuracy"):
            for variant, runs in results.items():
                row[f"{key}_{variant}"] = float(np.mean([r.epochs[epoch][key] for r in runs]))
        row["val_accuracy_baseline"] = baseline_valid_accuracy
        rows.append(row)
    return rows


def correctness_grid(results: list[SeedResult]) -> np.ndarray:
    """(pretraining runs, fine-tuning seeds, examples) 0/1 array, sorted; the runs must form the full grid."""
    pretrain_seeds = sorted({r.pretrain_seed for r in results})
    seeds = sorted({r.seed for r in results})
    by_cell = {(r.pretrain_seed, r.seed): r.correct for r in results}
    missing = [finetune_run(s, p) for p in pretrain_seeds for s in seeds if (p, s) not in by_cell]
    if missing:
        raise ValueError(f"the fine-tuned runs do not form a grid of pretraining x fine-tuning seeds: "
                         f"missing {', '.join(missing)}")
    return np.stack([np.stack([by_cell[p, s] for s in seeds]) for p in pretrain_seeds])


def pretraining_report(summaries: dict[int, dict]) -> dict:
    """The pretraining runs' summaries: each number's mean at the top (`val_perplexity`, ...), each run's under
    `per_seed`."""
    first = next(iter(summaries.values()))
    means = {key: (float(np.mean([s[key] for s in summaries.values()])) if isinstance(value, (int, float))
                   and not isinstance(value, bool) else value) for key, value in first.items()}
    return {**means, "seeds": list(summaries), "per_seed": {str(seed): s for seed, s in summaries.items()}}


def transfer_report(
    pretrained: list[SeedResult], scratch: list[SeedResult], baseline: dict, params: EvaluateParams,
    pretraining: dict,
) -> dict:
    """The gap and its uncertainty, each variant, the baseline, and the pretraining summaries (their files are
    DVC-cached: this git-tracked report keeps them for `lmtransfer compare`)."""
    if [r.run for r in pretrained] != [r.run for r in scratch]:
        raise ValueError("pretrained and scratch must be evaluated on the same runs (they are paired run by run)")
    correct_pretrained, correct_scratch = correctness_grid(pretrained), correctness_grid(scratch)
    uncertainty = gap_uncertainty(correct_pretrained, correct_scratch, params.bootstrap_samples, seed=params.seed)
    pretrained_report, scratch_report = variant_report(pretrained), variant_report(scratch)
    difference = {key: pretrained_report[key] - scratch_report[key]
                  for key in ("accuracy_mean", "macro_f1_mean", "first_epoch_val_accuracy_mean")}
    gap = {"accuracy_mean": difference["accuracy_mean"],
           **{key: uncertainty[key] for key in ("ci95_low", "ci95_high", "p_value", "std", "spread", "share")},
           "macro_f1_mean": difference["macro_f1_mean"],
           "first_epoch_val_accuracy_mean": difference["first_epoch_val_accuracy_mean"]}
    runs, seeds, examples = (int(n) for n in correct_pretrained.shape)
    return {"gap": gap, "pretrained": pretrained_report, "scratch": scratch_report,
            "baseline": {key: baseline[key] for key in ("accuracy", "macro_f1", "valid_accuracy")},
            "n_seeds": len(pretrained), "n_pretraining_runs": runs, "n_finetuning_seeds": seeds,
            "n_test_examples": examples, "pretraining": pretraining}


def headline_metrics(report: dict) -> dict:
    """The answer in eight flat numbers (`metrics/headline.json`), named short so `dvc metrics show` fits one
    120-column row; `head_start` is the gap in validation accuracy after one epoch."""
    gap = report["gap"]
    return {"pretrained": report["pretrained"]["accuracy_mean"], "scratch": report["scratch"]["accuracy_mean"],
            "gap": gap["accuracy_mean"], "gap_low": gap["ci95_low"], "gap_high": gap["ci95_high"],
            "p_value": gap["p_value"], "head_start": gap["first_epoch_val_accuracy_mean"],
            "baseline": report["baseline"]["accuracy"]}


def runs_described(report: dict) -> str:
    """`3 runs (3 pretraining runs x 1 fine-tuning seed)`: what each variant's mean is over."""
    runs, seeds = report["n_pretraining_runs"], report["n_finetuning_seeds"]
    return (f"{report['n_seeds']} runs ({runs} pretraining run{'s' * (runs != 1)} x {seeds} fine-tuning "
            f"seed{'s' * (seeds != 1)})")


def spread_line(gap: dict, n_finetuning_seeds: int) -> str:
    """Where the gap's uncertainty comes from: each source's share of the variance, resampled alone."""
    share = gap["share"]
    runs = "pretraining runs" if n_finetuning_seeds > 1 else "pretraining runs (with their one fine-tune each)"
    parts = [f"{runs} {share['pretraining_runs']:.0%}"]
    if n_finetuning_seeds > 1:
        parts.append(f"fine-tuning seeds {share['finetuning_seeds']:.0%}")
    parts.append(f"test examples {share['test_examples']:.0%}")
    return "the gap's spread comes from: " + ", ".join(parts)


CURVES_HINT = ("Per-epoch curves of both variants side by side: expand the pipeline run, then the chart view (the "
               "second button above the table): `val_accuracy` per epoch, one line per fine-tune, named "
               "finetune_pretrained@... and finetune_scratch@....")


def answer_line(report: dict) -> str:
    """The answer in one line: the first line of the experiment's description, which the MLflow UI shows."""
    gap = report["gap"]
    return (f"**Test accuracy** over {runs_described(report)}: pretrained {report['pretrained']['accuracy_mean']:.4f}"
            f", scratch {report['scratch']['accuracy_mean']:.4f}, gap {gap['accuracy_mean']:+.4f} "
            f"[{gap['ci95_low']:+.4f}, {gap['ci95_high']:+.4f}] (95% CI), TF-IDF + logistic regression "
            f"{report['baseline']['accuracy']:.4f}")


def report_lines(report: dict) -> list[str]:
    """The answer in a few lines, as the evaluate stage prints it."""
    lines = [f"{variant:>10}: test accuracy {report[variant]['accuracy_mean']:.4f} "
             f"± {report[variant]['accuracy_std']:.4f} over {runs_described(report)} "
             f"(epoch-1 validation {report[variant]['first_epoch_val_accuracy_mean']:.4f})"
             for variant in VARIANTS]
    gap = report["gap"]
    lines.append(f"  baseline: test accuracy {report['baseline']['accuracy']:.4f} (TF-IDF + logistic regression)")
    lines.append(f"gap {gap['accuracy_mean']:+.4f}, 95% CI [{gap['ci95_low']:+.4f}, {gap['ci95_high']:+.4f}], "
                 f"p = {gap['p_value']:.4f}")
    lines.append(spread_line(gap, report["n_finetuning_seeds"]))
    return lines


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
        confusion = {v: {"labels": runs[0].metrics["labels"], "runs": [r.run for r in runs],
                         "rows_actual_columns_predicted": np.sum([r.metrics["confusion"] for r in runs], 0).tolist()}
                     for v, runs in results.items()}
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
        show_answer(answer_line(report), report_lines(report) + [CURVES_HINT], list(headline))
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
        probabilities, loss = predict(build_classifier(payload), test, params.evaluate.batch_size, payload["max_len"],
                                      device)
        predicted, names = probabilities.argmax(-1), payload["label_names"]
        matrix = confusion_matrix(test.labels, predicted, len(names))
        metrics = {"accuracy": accuracy(matrix), "macro_f1": macro_f1(matrix), "loss": loss, "confusion": matrix,
                   "labels": names, "f1_per_class": dict(zip(names, map(float, per_class_f1(matrix))))}
        epochs = read_tsv(require_file(finetune_epochs(variant, run), "fine-tuning metrics"))
        history = [{key: float(value) for key, value in row.items()} for row in epochs]
        results[variant].append(SeedResult(*cells[runs[step % len(runs)]], metrics, predicted == test.labels, history))
        prediction_rows[variant] += [f"{run},{names[a]},{names[p]}" for a, p in zip(test.labels, predicted)]
        log_model_metrics(path, {"test_accuracy": metrics["accuracy"], "test_macro_f1": metrics["macro_f1"]})
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


def baseline_at_size(texts: dict[str, list[str]], labels: dict[str, np.ndarray], size: int, seed: int,
                     params: BaselineParams) -> dict:
    """TF-IDF + logistic regression on the fine-tunes' subset of `size`, C chosen on the whole validation split."""
    from lmtransfer.classification.baseline import run_baseline  # scikit-learn: a second `lmtransfer` commands skip

    keep = label_subset(labels["train"], size, seed)
    result = run_baseline([texts["train"][i] for i in keep], labels["train"][keep], texts["valid"], labels["valid"],
                          texts["test"], labels["test"], params)
    return {"accuracy": result.accuracy, "macro_f1": result.macro_f1,
            "valid_accuracy": result.valid_accuracy_by_c[result.best_c], "best_c": result.best_c}


def curve_rows(reports: dict[str, dict]) -> list[dict]:
    return [{"labels": size, "n_train": report["n_train"], "pretrained": report["pretrained"]["accuracy_mean"],
             "scratch": report["scratch"]["accuracy_mean"], "pretrained_std": report["pretrained"]["accuracy_std"],
             "scratch_std": report["scratch"]["accuracy_std"], "gap": report["gap"]["accuracy_mean"],
             "gap_low": report["gap"]["ci95_low"], "gap_high": report["gap"]["ci95_high"],
             "p_value": report["gap"]["p_value"], "baseline": report["baseline"]["accuracy"]}
            for size, report in reports.items()]
