"""Classification metrics from a confusion matrix."""

from __future__ import annotations

import numpy as np


def confusion_matrix(actual: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    """Rows are actual classes, columns predicted classes."""
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (actual, predicted), 1)
    return matrix


def accuracy(matrix: np.ndarray) -> float:
    return float(np.trace(matrix) / max(1, matrix.sum()))


def per_class_f1(matrix: np.ndarray) -> np.ndarray:
    true_positive = np.diag(matrix).astype(float)
    predicted = matrix.sum(axis=0)
    actual = matrix.sum(axis=1)
    precision = np.divide(true_positive, predicted, out=np.zeros_like(true_positive), where=predicted > 0)
    recall = np.divide(true_positive, actual, out=np.zeros_like(true_positive), where=actual > 0)
    denominator = precision + recall
    return np.divide(2 * precision * recall, denominator, out=np.zeros_like(true_positive), where=denominator > 0)


def macro_f1(matrix: np.ndarray) -> float:
    """Over the classes in the labels or predicted (scikit-learn's rule)."""
    scored = (matrix.sum(axis=0) > 0) | (matrix.sum(axis=1) > 0)
    return float(per_class_f1(matrix)[scored].mean())
