"""The classical reference: TF-IDF word and character n-grams + L2 logistic regression on the very same splits, C
chosen on valid, scored on test. A transformer number means little without this one beside it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import FeatureUnion

from lmtransfer.classification.config import BaselineParams, ClassificationParams
from lmtransfer.core.io import write_json
from lmtransfer.core.paths import BASELINE_METRICS, PREPARED
from lmtransfer.data.prepared import SPLITS, read_prepared_meta, read_split
from lmtransfer.harness.tracking import log_run, stage_run


@dataclass
class BaselineResult:
    best_c: float
    valid_accuracy_by_c: dict[float, float]
    test_predictions: np.ndarray
    accuracy: float
    macro_f1: float


def run_baseline(
    train_texts: list[str], train_labels: np.ndarray,
    valid_texts: list[str], valid_labels: np.ndarray,
    test_texts: list[str], test_labels: np.ndarray,
    params: BaselineParams,
) -> BaselineResult:
    """Tune C on valid (ties: the smaller C), then score the chosen model on test; features are fitted once."""
    features = FeatureUnion([
        (name, TfidfVectorizer(analyzer=analyzer, ngram_range=tuple(ngrams), sublinear_tf=True, min_df=params.min_df))
        for name, analyzer, ngrams in (("words", "word", params.word_ngrams), ("chars", "char_wb", params.char_ngrams))
    ])
    train_features = features.fit_transform(train_texts)
    valid_features = features.transform(valid_texts)
    valid_accuracy, models = {}, {}
    for c in params.c_values:
        # liblinear (fast on sparse TF-IDF) is binary only: one-vs-rest serves any number of classes
        model = OneVsRestClassifier(LogisticRegression(C=c, max_iter=params.max_iter, solver="liblinear",
                                                       random_state=0)).fit(train_features, train_labels)
        valid_accuracy[c] = float(accuracy_score(valid_labels, model.predict(valid_features)))
        models[c] = model
    best_c = max(params.c_values, key=lambda c: (valid_accuracy[c], -c))
    predicted = models[best_c].predict(features.transform(test_texts))
    return BaselineResult(best_c, valid_accuracy, predicted, float(accuracy_score(test_labels, predicted)),
                          float(f1_score(test_labels, predicted, average="macro")))


def run_baseline_stage(params: ClassificationParams) -> None:
    label_names = read_prepared_meta(PREPARED)["label_names"]
    splits = {name: read_split(PREPARED, name) for name in SPLITS}
    with stage_run("baseline", params.sections("baseline")):
        result = run_baseline(*[item for name in SPLITS for item in (splits[name]["text"].tolist(),
                                                                    splits[name]["label"].to_numpy())],
                              params=params.baseline)
        summary = {"accuracy": result.accuracy, "macro_f1": result.macro_f1,
                   "valid_accuracy": result.valid_accuracy_by_c[result.best_c], "best_c": result.best_c,
                   "valid_accuracy_by_c": {str(c): a for c, a in result.valid_accuracy_by_c.items()},
                   "n_test_examples": len(splits["test"]), "label_names": label_names}
        write_json(BASELINE_METRICS, summary)
        log_run(metrics={"test_accuracy": result.accuracy, "test_macro_f1": result.macro_f1,
                         "valid_accuracy": summary["valid_accuracy"], "best_c": result.best_c})
        for step, (_, accuracy) in enumerate(sorted(result.valid_accuracy_by_c.items())):
            log_run(metrics={"valid_accuracy_by_c": accuracy}, step=step)
    print(f"baseline: TF-IDF + logistic regression, C={result.best_c:g} (validation accuracy "
          f"{summary['valid_accuracy']:.4f}): test accuracy {result.accuracy:.4f}, macro-F1 {result.macro_f1:.4f}")
