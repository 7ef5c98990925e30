"""The classifier as an MLflow model: logged from the checkpoint, loaded anywhere, giving predict's probabilities."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch

from lmtransfer.classification.inference import classify_texts
from lmtransfer.classification.mlflow_model import log_classifier, texts_of
from lmtransfer.harness import tracking
from lmtransfer.harness.tracking import CHAMPION, MODEL_ID_TAG, register_champion, registered_name
from lmtransfer.modeling.checkpoint import load_checkpoint, save_checkpoint
from lmtransfer.modeling.model import Classifier, ModelConfig
from lmtransfer.tokens.tokenizer import load_tokenizer, tokenizer_fingerprint

from loopback import free_port

WORDS = "good bad film movie great awful plot actor dull moving funny long short script music scene".split()
TEXTS = ["a wonderful film", "dull and long", "the plot was moving"]


@pytest.fixture(scope="module")
def fine_tuned(tiny_tokenizer, tmp_path_factory) -> tuple[Path, Path]:
    """A tiny classifier checkpoint (2 classes, random weights) and the tokenizer it records."""
    tokenizer_dir, tokenizer = tiny_tokenizer(WORDS)
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0)
    checkpoint = tmp_path_factory.mktemp("model") / "seed0-0.pt"
    save_checkpoint(checkpoint, Classifier(config, 2, "mean"), "classifier", config, n_classes=2, pooling="mean",
                    label_names=["neg", "pos"], max_len=32, tokenizer_sha256=tokenizer_fingerprint(tokenizer_dir))
    return checkpoint, tokenizer_dir


@pytest.fixture(scope="module")
def logged(fine_tuned, mlflow_store) -> tuple[str, str]:
    """The model logged on a run of the module's fresh store: (its model id, the run id)."""
    checkpoint, tokenizer_dir = fine_tuned
    with mlflow.start_run(experiment_id=mlflow_store) as run:
        model_id = log_classifier(checkpoint, tokenizer_dir, ["neg", "pos"], "pretrained-0-0", {"best_val_accuracy": 0.75})
    return model_id, run.info.run_id


@pytest.mark.slow
def test_the_logged_model_gives_the_probabilities_predict_gives(fine_tuned, logged):
    checkpoint, tokenizer_dir = fine_tuned
    model = mlflow.pyfunc.load_model(f"models:/{logged[0]}")
    served = model.predict(pd.DataFrame({"text": TEXTS}))
    expected = classify_texts(load_checkpoint(checkpoint, "classifier"), load_tokenizer(tokenizer_dir), TEXTS,
                              torch.device("cpu"))
    assert list(served.columns) == ["label", "probability", "p_neg", "p_pos"]
    assert (served[["p_neg", "p_pos"]].to_numpy() == expected).all()
    assert list(served["label"]) == [["neg", "pos"][i] for i in expected.argmax(axis=1)]
    assert model.metadata.get_input_schema().input_names() == ["text"]


def test_the_model_carries_the_checkpoint_byte_for_byte_and_its_run_names_it(fine_tuned, logged):
    model_id, run_id = logged
    folder = Path(mlflow.artifacts.download_artifacts(f"models:/{model_id}"))
    carried = next(folder.rglob(fine_tuned[0].name))
    assert hashlib.sha256(carried.read_bytes()).digest() == hashlib.sha256(fine_tuned[0].read_bytes()).digest()
    assert (folder / "MLmodel").is_file() and any(folder.rglob("spm.model"))
    assert not any(folder.rglob("*.npz"))  # the tokenizer's files alone, not the tokenized splits beside them
    assert mlflow.get_run(run_id).data.tags[MODEL_ID_TAG] == model_id
    model = mlflow.get_logged_model(model_id)
    assert model.name == "pretrained-0-0"  # variant and run: the Models page tells the fine-tunes apart
    assert {m.key: m.value for m in model.metrics} == {"best_val_accuracy": 0.75}


def test_a_request_is_a_text_column_a_single_column_a_list_or_a_string():
    assert texts_of(pd.DataFrame({"text": ["a", "b"]})) == ["a", "b"]
    assert texts_of(pd.DataFrame({"review": ["a"]})) == ["a"]
    assert texts_of(["a", 3]) == ["a", "3"] and texts_of("a") == ["a"]
    with pytest.raises(ValueError, match="one column, 'text'"):
        texts_of(pd.DataFrame({"x": ["a"], "y": ["b"]}))


def test_the_registry_gets_one_version_per_model_and_numbers_and_champion_points_at_the_latest(
        fine_tuned, logged, monkeypatch):
    monkeypatch.setattr(tracking, "project_root", Path.cwd)  # the repository's own pipeline: no folder suffix
    checkpoint, _ = fine_tuned
    _, run_id = logged
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow.get_tracking_uri())
        numbers = {"gap": "0.031000", "gap_low": "0.012000", "gap_high": "0.050000", "params_sha256": "ab"}
        first = register_champion("classification", run_id, checkpoint, numbers)
        again = register_champion("classification", run_id, checkpoint, numbers)  # an evaluate that changed nothing
        client = mlflow.MlflowClient()
        assert first == again == "1" and len(client.search_model_versions("name='lmtransfer-classification'")) == 1
        version = client.get_model_version_by_alias("lmtransfer-classification", CHAMPION)
        assert str(version.version) == "1" and version.tags["gap"] == "0.031000"
        assert version.tags["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
        champion = mlflow.pyfunc.load_model(f"models:/lmtransfer-classification@{CHAMPION}")
        assert len(champion.predict(pd.DataFrame({"text": TEXTS}))) == len(TEXTS)
        moved = register_champion("classification", run_id, checkpoint, {**numbers, "gap": "0.040000"})
        version = client.get_model_version_by_alias("lmtransfer-classification", CHAMPION)
        assert moved == "2" and str(version.version) == "2"


def test_a_profiles_experiment_registers_under_a_name_of_its_own(tmp_path, monkeypatch):
    """`lmtransfer profile course` (dvc exp run -n course) answers another question: its champion is apart."""
    monkeypatch.setattr(tracking, "project_root", lambda: tmp_path)
    monkeypatch.setenv("DVC_EXP_NAME", "course")
    assert registered_name("classification") == "lmtransfer-classification"  # not a profile: a plain experiment
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "course.yaml").write_text("model: {n_layers: 4}\n")
    assert registered_name("classification") == "lmtransfer-classification-course"
    monkeypatch.delenv("DVC_EXP_NAME")
    assert registered_name("classification") == "lmtransfer-classification"


@pytest.mark.slow  # a server process: about 15 s
def test_mlflow_models_serve_answers_with_the_probabilities_predict_gives(fine_tuned, logged, monkeypatch):
    """`mlflow models serve -m models:/...@champion` on loopback answers, to 1e-6, what `lmtransfer predict` prints."""
    monkeypatch.setattr(tracking, "project_root", Path.cwd)
    checkpoint, tokenizer_dir = fine_tuned
    store = mlflow.get_tracking_uri()
    register_champion("classification", logged[1], checkpoint, {"gap": "0.5"})
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": store,  # uvicorn, which mlflow starts, from this environment's bin/
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "models", "serve", "-m", f"models:/lmtransfer-classification@{CHAMPION}",
         "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "mlflow models serve did not answer within 120 s"
                time.sleep(0.5)
        request = json.dumps({"dataframe_split": {"columns": ["text"], "data": [[text] for text in TEXTS]}}).encode()
        answer = urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations", request, {"Content-Type": "application/json"}), timeout=30)
        rows = json.loads(answer.read())["predictions"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    expected = classify_texts(load_checkpoint(checkpoint, "classifier"), load_tokenizer(tokenizer_dir), TEXTS,
                              torch.device("cpu"))
    assert [row["label"] for row in rows] == [["neg", "pos"][i] for i in expected.argmax(axis=1)]
    assert all(abs(row["p_neg"] - p[0]) < 1e-6 and abs(row["p_pos"] - p[1]) < 1e-6 for row, p in zip(rows, expected))
    printed = subprocess.run([sys.executable, "-m", "lmtransfer.cli", "predict", *TEXTS, "--checkpoint",
                              str(checkpoint), "--tokenizer", str(tokenizer_dir)],
                             capture_output=True, text=True, check=True).stdout
    assert [line.split("\t")[0] for line in printed.splitlines()] == [row["label"] for row in rows]
    assert [line.split("\t")[1] for line in printed.splitlines()] == [f"{r['probability']:.3f}" for r in rows]
