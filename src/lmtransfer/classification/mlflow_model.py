"""A fine-tune as an MLflow model (the checkpoint and its tokenizer): texts in, the label and each class's
probability out, from `inference.classify_texts` as `lmtransfer predict` gives them."""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc
import numpy as np
import pandas as pd

from lmtransfer.harness.tracking import log_model

TEXT_COLUMN = "text"  # the one input column
EXAMPLE_TEXTS = ["a wonderful film, moving and funny", "dull and far too long"]  # the model's input example


class TextClassifier(mlflow.pyfunc.PythonModel):

    def load_context(self, context) -> None:
        from lmtransfer.modeling.checkpoint import load_checkpoint
        from lmtransfer.modeling.runtime import select_device
        from lmtransfer.tokens.tokenizer import check_trained_with, load_tokenizer

        checkpoint, tokenizer = context.artifacts["checkpoint"], context.artifacts["tokenizer"]
        self.payload = load_checkpoint(checkpoint, expected_kind="classifier")
        self.tokenizer = load_tokenizer(tokenizer)
        check_trained_with(self.payload, checkpoint, self.tokenizer, tokenizer)
        self.device = select_device("auto")

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        from lmtransfer.classification.inference import classify_texts

        return prediction_frame(classify_texts(self.payload, self.tokenizer, texts_of(model_input), self.device),
                                self.payload["label_names"])


def texts_of(model_input) -> list[str]:
    """The texts of a request: a DataFrame's `text` column (or its only column), a list or a single string."""
    if isinstance(model_input, pd.DataFrame):
        if TEXT_COLUMN not in model_input.columns and len(model_input.columns) != 1:
            raise ValueError(f"the model reads one column, {TEXT_COLUMN!r}; got columns {list(model_input.columns)}")
        model_input = model_input.get(TEXT_COLUMN, model_input.iloc[:, 0])
    return [model_input] if isinstance(model_input, str) else [str(text) for text in model_input]


def prediction_frame(probabilities, label_names: list[str]) -> pd.DataFrame:
    """One row per text: `label`, its `probability`, and `p_<class>` for every class in the checkpoint's order."""
    best = probabilities.argmax(axis=1)
    frame = pd.DataFrame({"label": [str(label_names[i]) for i in best],
                          "probability": probabilities[range(len(best)), best].astype(float)})
    for index, name in enumerate(label_names):
        frame[f"p_{name}"] = probabilities[:, index].astype(float)
    return frame


def log_classifier(checkpoint: str | Path, tokenizer_dir: str | Path, label_names: list[str], name: str,
                   metrics: dict[str, float]) -> str:
    """Log the checkpoint a fine-tune wrote as the MLflow model `name` (`pretrained-0-0`: variant and run, so the
    Models page tells them apart) with its validation `metrics`, on the active run; returns the model's id."""
    example = pd.DataFrame({TEXT_COLUMN: EXAMPLE_TEXTS})
    output = prediction_frame(np.full((len(EXAMPLE_TEXTS), len(label_names)), 1.0 / len(label_names)), label_names)
    return log_model(name, TextClassifier(), checkpoint, tokenizer_dir, example, output, metrics=metrics)
