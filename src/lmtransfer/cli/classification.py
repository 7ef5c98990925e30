"""The classification task's commands: `lmtransfer predict`, `lmtransfer register`, and the report `lmtransfer results`
prints."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from lmtransfer.cli.args import add_model_files, add_texts, how_to_pass, texts_from_arguments_or_stdin
from lmtransfer.core import paths

HOW_TO_PASS_TEXTS = how_to_pass("predict", 'a wonderful film" "dull', "reviews.txt")


def cmd_predict(args: argparse.Namespace) -> None:
    from lmtransfer.classification.inference import classify_texts
    from lmtransfer.modeling.checkpoint import load_checkpoint
    from lmtransfer.modeling.runtime import select_device
    from lmtransfer.tokens.tokenizer import check_trained_with, load_tokenizer

    texts = texts_from_arguments_or_stdin(getattr(args, "texts", []), "classify", HOW_TO_PASS_TEXTS)
    payload = load_checkpoint(args.checkpoint, expected_kind="classifier")
    tokenizer = load_tokenizer(args.tokenizer)
    check_trained_with(payload, args.checkpoint, tokenizer, args.tokenizer)
    probabilities = classify_texts(payload, tokenizer, texts, select_device("auto"))
    names = payload["label_names"]
    for text, row in zip(texts, probabilities):
        best = int(row.argmax())
        print(f"{names[best]}\t{row[best]:.3f}\t{text}")


def results_report(metrics_dir: Path = paths.METRICS) -> str:
    """The experiment's answer in a few lines: test scores over the runs, the gap with its interval and where its
    spread comes from, the baseline, and mean validation accuracy per epoch."""
    from lmtransfer.reporting.result_files import read_result_json, reading

    path = metrics_dir / paths.EVALUATE_REPORT.name
    report = read_result_json(path, "evaluation metrics")
    with reading(path, "evaluation metrics"):
        return _report_lines(report)


def _report_lines(report: dict) -> str:
    from lmtransfer.classification.evaluate import runs_described, spread_line
    from lmtransfer.reporting.result_files import read_result_json

    pretraining = report["pretraining"]  # metrics/pretrain/*.json are DVC-cached: evaluate.json carries them in git
    gap = report["gap"]

    def spread(variant: str, key: str) -> str:
        return f"{report[variant][f'{key}_mean']:.4f} ± {report[variant][f'{key}_std']:.4f}"

    lines = [
        f"test ({report['n_test_examples']} examples; mean ± std over {runs_described(report)})",
        f"  {'':<34}{'accuracy':>18}{'macro-F1':>18}",
        f"  {'pretrained':<34}{spread('pretrained', 'accuracy'):>18}{spread('pretrained', 'macro_f1'):>18}",
        f"  {'from scratch':<34}{spread('scratch', 'accuracy'):>18}{spread('scratch', 'macro_f1'):>18}",
        f"  {'TF-IDF + logistic regression':<34}{report['baseline']['accuracy']:>18.4f}"
        f"{report['baseline']['macro_f1']:>18.4f}",
        f"  gap (pretrained - scratch): {gap['accuracy_mean']:+.4f} accuracy, 95% CI "
        f"[{gap['ci95_low']:+.4f}, {gap['ci95_high']:+.4f}], p = {gap['p_value']:.4g}",
        f"  ({spread_line(gap, report['n_finetuning_seeds'])})",
        "",
        f"  {'epoch':<8}{'val acc pretrained':>20}{'val acc scratch':>18}{'gap':>10}",
    ]
    curves = zip(report["pretrained"]["val_accuracy_mean_per_epoch"], report["scratch"]["val_accuracy_mean_per_epoch"])
    for epoch, (pretrained, scratch) in enumerate(curves, start=1):
        lines.append(f"  {epoch:<8}{pretrained:>20.4f}{scratch:>18.4f}{pretrained - scratch:>+10.4f}")
    lines += [
        f"  (TF-IDF baseline on the same validation split: {report['baseline']['valid_accuracy']:.4f})",
        "",
        f"pretraining: {len(pretraining['seeds'])} runs of {pretraining['steps']:.0f} steps, "
        f"{pretraining['tokens_seen']:,.0f} tokens, validation perplexity {pretraining['val_perplexity']:.1f} "
        "(mean of the runs)",
    ]
    timings = paths.timings_file(paths.PretrainOutputs(pretraining["seeds"][0]).stage)
    if timings.is_file():
        lines[-1] += f", {read_result_json(timings, 'timings')['tokens_per_second']:,.0f} tokens/s on this machine"
    return "\n".join(lines)


def cmd_register(args: argparse.Namespace) -> None:
    import mlflow

    from lmtransfer.classification.config import load_classification_params
    from lmtransfer.classification.evaluate_stage import register_best_pretrained
    from lmtransfer.harness.tracking import check_store

    mlflow.set_tracking_uri(check_store())
    register_best_pretrained(load_classification_params(paths.PARAMS))


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register `predict` and `register` (`command` makes a subparser)."""
    predict_parser = command(
        "predict", "label + probability for new texts (arguments or standard input)",
        "Label and probability for each text, with a fine-tuned classifier. Texts come from the arguments, "
        "else from piped standard input, one per line (blank lines skipped).",
    )
    add_texts(predict_parser, "TEXT", "texts to classify")
    add_model_files(predict_parser, paths.finetuned_checkpoint("pretrained", paths.finetune_run(0, 0)),
                    "a fine-tuned classifier checkpoint (seed<p>-<f>.pt: pretraining run p, fine-tuning seed f)",
                    paths.TOKENIZED)
    predict_parser.set_defaults(func=cmd_predict)
    command("register", "the best pretrained fine-tune (on validation) as the registry's @champion",
            "What the evaluate stage does at its end, from the files it wrote: the pretrained fine-tune with the best "
            "validation accuracy as a version of lmtransfer-classification, tagged with the gap, @champion. "
            "`make run` calls it after `dvc repro`, which skips an unchanged evaluate (a fresh clone's new MLflow "
            "store then has no registry); a version with the same checkpoint and numbers is not added twice.",
            ).set_defaults(func=cmd_register)
