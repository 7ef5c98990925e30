"""Where pretraining pays (ULMFiT's figure 3): test accuracy per number of labeled examples, evaluate's part."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmtransfer.classification.config import BaselineParams
from lmtransfer.classification.label_subsets import label_subset

LABEL_CURVE = Path("metrics/evaluate/label_curve.tsv")  # evaluate's: test accuracy per number of labeled examples


def baseline_at_size(texts: dict[str, list[str]], labels: dict[str, np.ndarray], size: int, seed: int,
                     params: BaselineParams) -> dict:
    """TF-IDF + logistic regression on the fine-tunes' subset of `size`, C chosen on the whole validation split."""
    from lmtransfer.classification.baseline import run_baseline  # scikit-learn: a second the plot stage never uses

    keep = label_subset(labels["train"], size, seed)
    result = run_baseline([texts["train"][i] for i in keep], labels["train"][keep], texts["valid"], labels["valid"],
                          texts["test"], labels["test"], params)
    return {"accuracy": result.accuracy, "macro_f1": result.macro_f1,
            "valid_accuracy": result.valid_accuracy_by_c[result.best_c], "best_c": result.best_c}


def curve_rows(reports: dict[str, dict]) -> list[dict]:
    rows = []
    for size, report in reports.items():
        gap = report["gap"]
        rows.append({"labels": size, "n_train": report["n_train"],
                     "pretrained": report["pretrained"]["accuracy_mean"], "scratch": report["scratch"]["accuracy_mean"],
                     "pretrained_std": report["pretrained"]["accuracy_std"], "scratch_std": report["scratch"]["accuracy_std"],
                     "gap": gap["accuracy_mean"], "gap_low": gap["ci95_low"], "gap_high": gap["ci95_high"],
                     "p_value": gap["p_value"], "baseline": report["baseline"]["accuracy"]})
    return rows
