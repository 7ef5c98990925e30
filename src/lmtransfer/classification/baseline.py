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

from lmtransfer.classification.config import BaselineParams


@dataclass
class BaselineResult:
    best_c: float
    valid_accuracy_by_c: dict[float, float]
    test_predictions: np.ndarray
    accuracy: float
    macro_f1: float


def tfidf_features(params: BaselineParams) -> FeatureUnion:
    return FeatureUnion([
        ("words", TfidfVectorizer(analyzer="word", ngram_range=tuple(params.word_ngrams), sublinear_tf=True,
                                  min_df=params.min_df)),
        ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=tuple(params.char_ngrams), sublinear_tf=True,
                                  min_df=params.min_df)),
    ])


def logistic_regression(params: BaselineParams, c: float) -> OneVsRestClassifier:
    # liblinear (fast on sparse TF-IDF) is binary only: one-vs-rest serves any number of classes
    return OneVsRestClassifier(LogisticRegression(C=c, max_iter=params.max_iter, solver="liblinear", random_state=0))


def run_baseline(
    train_texts: list[str], train_labels: np.ndarray,
    valid_texts: list[str], valid_labels: np.ndarray,
    test_texts: list[str], test_labels: np.ndarray,
    params: BaselineParams,
) -> BaselineResult:
    """Tune C on valid (ties: the smaller C), then score the chosen model on test; features are fitted once."""
    features = tfidf_features(params)
    train_features = features.fit_transform(train_texts)
    valid_features = features.transform(valid_texts)
    valid_accuracy, models = {}, {}
    for c in params.c_values:
        model = logistic_regression(params, c).fit(train_features, train_labels)
        valid_accuracy[c] = float(accuracy_score(valid_labels, model.predict(valid_features)))
        models[c] = model
    best_c = max(params.c_values, key=lambda c: (valid_accuracy[c], -c))
    predicted = models[best_c].predict(features.transform(test_texts))
    return BaselineResult(
        best_c=best_c,
        valid_accuracy_by_c=valid_accuracy,
        test_predictions=predicted,
        accuracy=float(accuracy_score(test_labels, predicted)),
        macro_f1=float(f1_score(test_labels, predicted, average="macro")),
    )
