"""Test-set evaluation of both fine-tuned models and the transfer gap between them."""

from __future__ import annotations

import numpy as np
import torch

from .checkpoint import build_classifier
from .finetune import predict
from .metrics import accuracy, confusion_matrix, macro_f1, per_class_f1
from .tokenizer import LabeledSplit


def evaluate_classifier(
    payload: dict, test: LabeledSplit, batch_size: int, device: torch.device
) -> tuple[dict, np.ndarray]:
    """Metrics dict and predicted class per example for one fine-tuned checkpoint."""
    model = build_classifier(payload).to(device)
    probabilities, loss = predict(model, test, batch_size, payload["max_len"], device)
    predicted = probabilities.argmax(-1)
    label_names = payload["label_names"]
    matrix = confusion_matrix(test.labels, predicted, len(label_names))
    metrics = {
        "accuracy": accuracy(matrix),
        "macro_f1": macro_f1(matrix),
        "loss": loss,
        "f1_per_class": dict(zip(label_names, map(float, per_class_f1(matrix)))),
        "confusion_matrix": {"labels": label_names, "rows_actual_columns_predicted": matrix.tolist()},
        "n_examples": len(test),
    }
    return metrics, predicted


def transfer_gap(results: dict[str, dict]) -> dict[str, float]:
    return {
        "accuracy_gap": results["pretrained"]["accuracy"] - results["scratch"]["accuracy"],
        "macro_f1_gap": results["pretrained"]["macro_f1"] - results["scratch"]["macro_f1"],
    }
