"""The translation fine-tune as an MLflow model, translating as `lmtransfer translate` does, beam size a param."""

from __future__ import annotations

import mlflow
import pandas as pd
import pytest
import torch

from lmtransfer.harness.tracking import MODEL_ID_TAG
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.tokens.tokenizer import tokenizer_fingerprint
from lmtransfer.translation.mlflow_model import MODEL_NAME, log_translator
from lmtransfer.translation.model import TranslationConfig, TranslationModel
from lmtransfer.translation.translator import DecodingOptions, load_translation_model, translate_texts

WORDS = "the light and dark day night la lumière et nuit jour le ciel sky earth terre water eau".split()
SOURCES = ["the light and the dark", "day and night", "the sky"]


@pytest.fixture(scope="module")
def logged(tiny_tokenizer, mlflow_store, tmp_path_factory):
    """A tiny translation checkpoint (random weights) and its tokenizer, logged on a run of the module's fresh store."""
    tokenizer_dir, tokenizer = tiny_tokenizer(WORDS)
    torch.manual_seed(0)
    config = TranslationConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_encoder_layers=1, n_decoder_layers=1,
                               n_heads=2, d_ff=32, dropout=0.0)
    checkpoint = tmp_path_factory.mktemp("translator") / "seed0-0.pt"
    save_checkpoint(checkpoint, TranslationModel(config), "translation", config, variant="pretrained", seed=0,
                    pretrain_seed=0, tokenizer_sha256=tokenizer_fingerprint(tokenizer_dir))
    with mlflow.start_run(experiment_id=mlflow_store) as run:
        model_id = log_translator(checkpoint, tokenizer_dir)
    return checkpoint, tokenizer, model_id, run.info.run_id


@pytest.mark.slow
def test_the_logged_model_translates_as_lmtransfer_translate_with_the_beam_size_a_parameter(logged):
    checkpoint, tokenizer, model_id, run_id = logged
    model = mlflow.pyfunc.load_model(f"models:/{model_id}")
    cpu = torch.device("cpu")
    network = load_translation_model(checkpoint, cpu)
    for beam in (1, 3):
        served = model.predict(pd.DataFrame({"text": SOURCES}), params={"beam_size": beam})
        expected = translate_texts(network, SOURCES, tokenizer, DecodingOptions(beam_size=beam), cpu)
        assert list(served["translation"]) == expected
    assert model.metadata.get_input_schema().input_names() == ["text"]
    assert {p.name for p in model.metadata.get_params_schema().params} == {"beam_size", "length_penalty"}
    assert mlflow.get_run(run_id).data.tags[MODEL_ID_TAG] == model_id
    assert mlflow.get_logged_model(model_id).name == MODEL_NAME
