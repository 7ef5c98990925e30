"""A classification fine-tune as an MLflow model: a column of texts in, the label and each class's probability out.

Each fine-tune stage logs one (`log_classifier`) from the checkpoint it wrote to models/ (the DVC output): the
model's `checkpoint` artifact is that very file (its sha256 is the run's checkpoint tag and the model's), its
`tokenizer` artifact the tokenizer it was trained with, and its code this package, so loading it needs neither the
repository nor the network. `mlflow.pyfunc.load_model(...).predict`, `mlflow models serve` and `lmtransfer
predict` all call `inference.classify_texts`: the same texts give the same probabilities.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import mlflow.pyfunc
import pandas as pd

from lmtransfer.harness.model_registry import MODEL_ID_TAG

MODEL_NAME = "classifier"  # the logged model's name in its run
TEXT_COLUMN = "text"  # the one input column
EXAMPLE_TEXTS = ["a wonderful film, moving and funny", "dull and far too long"]  # the model's input example
PACKAGE = Path(__file__).resolve().parents[1]  # src/lmtransfer: the model's code


class TextClassifier(mlflow.pyfunc.PythonModel):
    """The pyfunc flavour's model: loads the checkpoint and its tokenizer once, then classifies DataFrames."""

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
        if TEXT_COLUMN in model_input.columns:
            column = model_input[TEXT_COLUMN]
        elif len(model_input.columns) == 1:
            column = model_input.iloc[:, 0]
        else:
            raise ValueError(f"the model reads one column, {TEXT_COLUMN!r}; got columns {list(model_input.columns)}")
        return [str(text) for text in column]
    if isinstance(model_input, str):
        return [model_input]
    return [str(text) for text in model_input]


def prediction_frame(probabilities, label_names: list[str]) -> pd.DataFrame:
    """One row per text: `label` (the most probable class's name), `probability` (its probability) and
    `p_<class>` for every class, in the checkpoint's class order."""
    best = probabilities.argmax(axis=1)
    frame = pd.DataFrame({"label": [str(label_names[i]) for i in best],
                          "probability": probabilities[range(len(best)), best].astype(float)})
    for index, name in enumerate(label_names):
        frame[f"p_{name}"] = probabilities[:, index].astype(float)
    return frame


def _requirements() -> list[str]:
    """What loading the model needs, pinned to this environment's versions (MLflow would otherwise infer them by
    importing the model in a subprocess, seconds per fine-tune)."""
    from importlib.metadata import version

    return [f"{name}=={version(name).split('+')[0]}"
            for name in ("mlflow", "torch", "sentencepiece", "numpy", "pandas", "pydantic")]


def log_classifier(checkpoint: str | Path, tokenizer_dir: str | Path, label_names: list[str]) -> str:
    """Log the checkpoint a fine-tune wrote as an MLflow model on the active run; returns the model's id (also the
    run's MODEL_ID_TAG). The tokenizer's files are copied apart (the tokenized splits beside them stay out)."""
    import numpy as np
    from mlflow.models import infer_signature

    from lmtransfer.tokens.tokenizer import DICTIONARY_FILE, MODEL_FILE

    started = time.perf_counter()
    example = pd.DataFrame({TEXT_COLUMN: EXAMPLE_TEXTS})
    output = prediction_frame(np.full((len(EXAMPLE_TEXTS), len(label_names)), 1.0 / len(label_names)), label_names)
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = Path(folder, "tokenizer")
        tokenizer.mkdir()
        for name in (MODEL_FILE, DICTIONARY_FILE):
            if Path(tokenizer_dir, name).is_file():
                shutil.copy2(Path(tokenizer_dir, name), tokenizer / name)
        info = mlflow.pyfunc.log_model(
            name=MODEL_NAME, python_model=TextClassifier(),
            artifacts={"checkpoint": str(checkpoint), "tokenizer": str(tokenizer)},
            code_paths=[str(PACKAGE)], signature=infer_signature(example, output), input_example=example,
            pip_requirements=_requirements(),
        )
    mlflow.set_tag(MODEL_ID_TAG, info.model_id)
    print(f"MLflow model {info.model_uri} logged in {time.perf_counter() - started:.1f} s")
    return info.model_id
