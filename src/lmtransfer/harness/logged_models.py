"""A fine-tune's checkpoint as an MLflow model on its run: the pyfunc flavour, with the checkpoint file itself, the
tokenizer it was trained with and this package's code as the model's artifacts, so loading it needs neither the
repository nor the network. Each task's `mlflow_model` module gives the model class, its signature and example.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from lmtransfer.harness.model_registry import MODEL_ID_TAG
from lmtransfer.tokens.tokenizer import DICTIONARY_FILE, MODEL_FILE

PACKAGE = Path(__file__).resolve().parents[1]  # src/lmtransfer: the models' code


def requirements() -> list[str]:
    """What loading a model needs, pinned to this environment's versions (MLflow would otherwise infer them by
    importing the model in a subprocess, seconds per fine-tune)."""
    from importlib.metadata import version

    return [f"{name}=={version(name).split('+')[0]}"
            for name in ("mlflow", "torch", "sentencepiece", "numpy", "pandas", "pydantic")]


def log_pyfunc_model(name: str, python_model: Any, checkpoint: str | Path, tokenizer_dir: str | Path, example: Any,
                     output: Any, params: dict | None = None) -> str:
    """Log `python_model` on the active run as the model `name` (artifacts `checkpoint` and `tokenizer`, the
    signature of `example` -> `output` with inference `params`); returns its id, also the run's MODEL_ID_TAG."""
    import mlflow
    from mlflow.models import infer_signature

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = Path(folder, "tokenizer")  # its own files alone, not the tokenized splits beside them
        tokenizer.mkdir()
        for file in (MODEL_FILE, DICTIONARY_FILE):  # what tokens.tokenizer.load_tokenizer reads
            if Path(tokenizer_dir, file).is_file():
                shutil.copy2(Path(tokenizer_dir, file), tokenizer / file)
        info = mlflow.pyfunc.log_model(
            name=name, python_model=python_model,
            artifacts={"checkpoint": str(checkpoint), "tokenizer": str(tokenizer)},
            code_paths=[str(PACKAGE)], signature=infer_signature(example, output, params), input_example=example,
            pip_requirements=requirements(),
        )
    mlflow.set_tag(MODEL_ID_TAG, info.model_id)
    print(f"MLflow model {info.model_uri} logged in {time.perf_counter() - started:.1f} s")
    return info.model_id
