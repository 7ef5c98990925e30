"""A translation fine-tune as an MLflow model: English sentences in, French out, the beam size an inference
parameter. pyfunc `predict`, `mlflow models serve` and `lmtransfer translate` all decode through `translate_texts`."""

from __future__ import annotations

from pathlib import Path

import mlflow.pyfunc
import pandas as pd

from lmtransfer.harness.tracking import log_model
from lmtransfer.modeling.checkpoint import load_checkpoint
from lmtransfer.modeling.runtime import select_device
from lmtransfer.tokens.tokenizer import check_trained_with, load_tokenizer
from lmtransfer.translation.translator import DecodingOptions, translate_texts, translation_model

MODEL_NAME = "translator"  # the logged model's name in its run
TEXT_COLUMN = "text"  # the one input column: English sentences
EXAMPLE_TEXTS = ["In the beginning God created the heavens and the earth."]  # the model's input example
DEFAULT_PARAMS = {"beam_size": 1, "length_penalty": 0.6}  # inference parameters (`predict(..., params=...)`)


class SentenceTranslator(mlflow.pyfunc.PythonModel):
    """The pyfunc flavour's model: loads the checkpoint and its tokenizer once, then translates DataFrames."""

    def load_context(self, context) -> None:
        checkpoint, tokenizer = context.artifacts["checkpoint"], context.artifacts["tokenizer"]
        payload = load_checkpoint(checkpoint, expected_kind="translation")
        self.tokenizer = load_tokenizer(tokenizer)
        check_trained_with(payload, checkpoint, self.tokenizer, tokenizer)
        self.device = select_device("auto")
        self.model = translation_model(payload, self.device)

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        chosen = {**DEFAULT_PARAMS, **(params or {})}
        options = DecodingOptions(beam_size=int(chosen["beam_size"]), length_penalty=float(chosen["length_penalty"]))
        texts = [str(text) for text in model_input[TEXT_COLUMN]]
        return pd.DataFrame({"translation": translate_texts(self.model, texts, self.tokenizer, options, self.device)})


def log_translator(checkpoint: str | Path, tokenizer_dir: str | Path) -> str:
    """Log the checkpoint a fine-tune wrote as an MLflow model on the active run; returns the model's id."""
    example = pd.DataFrame({TEXT_COLUMN: EXAMPLE_TEXTS})
    output = pd.DataFrame({"translation": ["Au commencement, Dieu créa les cieux et la terre."]})
    return log_model(MODEL_NAME, SentenceTranslator(), checkpoint, tokenizer_dir, example, output, DEFAULT_PARAMS)
