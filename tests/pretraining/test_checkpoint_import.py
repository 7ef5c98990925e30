"""Importing checkpoints for `pretrain.init_from`: our own files and the original experiment's layout."""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import warnings

import pytest
import torch
from torch import nn

from lmtransfer.core.errors import TokenizerError
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.modeling.model import Classifier, LanguageModel, ModelConfig
from lmtransfer.pretraining.checkpoint_import import (
    CheckpointImportError,
    check_compatible,
    load_into_language_model,
    read_checkpoint_weights,
)
from lmtransfer.tokens.tokenizer import DictionaryTokenizer, check_trained_with

V, D, N, F, A = 50, 16, 2, 24, 2
CONFIG = ModelConfig(vocab_size=V, d_model=D, n_layers=N, n_heads=A, d_ff=F, dropout=0.1)
IDS = torch.randint(0, V, (3, 11), generator=torch.Generator().manual_seed(5))


# --- the original experiment, rebuilt here independently of our model ------------------
class OriginalBase(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(V, D)
        self.pos_encoder = nn.Module()  # the course's table: (max_len, 1, D), sequence-first, from the formula
        position = torch.arange(40, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, D, 2).float() * (-math.log(10000.0) / D))
        pe = torch.zeros(40, D)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.pos_encoder.register_buffer("pe", pe.unsqueeze(1))  # and a dropout: none in eval mode
        layer = nn.TransformerEncoderLayer(D, A, F, dropout=0.1, batch_first=False)
        self.transformer_encoder = nn.TransformerEncoder(layer, N, enable_nested_tensor=False)

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        """src (T, B) -> hidden (T, B, D), causal."""
        x = self.encoder(src) * math.sqrt(D) + self.pos_encoder.pe[: src.size(0)]
        mask = nn.Transformer.generate_square_subsequent_mask(src.size(0))
        return self.transformer_encoder(x, mask)


class OriginalModel(nn.Module):
    def __init__(self, outputs: int = V):
        super().__init__()
        self.base = OriginalBase()
        self.classifier = nn.Module()  # the course's head: classifier.decoder
        self.classifier.decoder = nn.Linear(D, outputs)

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        return self.classifier.decoder(self.base(src))


def _original(outputs: int = V) -> OriginalModel:
    """Random weights everywhere, so biases and norms (zero/one at init) also test the mapping."""
    torch.manual_seed(0)
    model = OriginalModel(outputs)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model.eval()


def _save_original(tmp_path, model: nn.Module, wrap: bool = True):
    path = tmp_path / "original.pt"
    state = model.state_dict()
    torch.save({"model_state_dict": state, "epoch": 3, "optimizer_state_dict": {}} if wrap else state, path)
    return path


def _fresh(config: ModelConfig = CONFIG, seed: int = 1) -> LanguageModel:
    torch.manual_seed(seed)
    return LanguageModel(config).eval()


# --- the mapping ----------------------------------------------------------------------
@pytest.mark.parametrize("layout, wrap", [("original", True), ("original", False), ("lmtransfer", True),
                                          ("lmtransfer", False)], ids=["model_state_dict", "bare", "ours", "own-bare"])
def test_a_language_model_checkpoint_gives_its_logits_and_says_if_it_records_no_head_count(tmp_path, layout, wrap):
    if layout == "original":
        source, atol = _original(), 1e-5
        path, logits = _save_original(tmp_path, source, wrap=wrap), lambda ids: source(ids.t()).transpose(0, 1)
    else:
        source, atol, path = _fresh(seed=7), 0.0, tmp_path / "lm.pt"
        logits = source
        if wrap:
            save_checkpoint(path, source, "language_model", CONFIG, mlflow_run_id="abc")
        else:
            torch.save(source.state_dict(), path)
    weights = read_checkpoint_weights(path)
    assert (weights.layout, weights.has_lm_head) == (layout, True)
    assert (weights.vocab_size, weights.d_model, weights.n_layers, weights.d_ff) == (V, D, N, F)
    ours = _fresh(seed=8)
    with torch.no_grad():
        untouched = ours(IDS)
        load_into_language_model(weights, ours)
        expected = logits(IDS)  # the course's model is sequence-first
        got = ours(IDS)
    assert not torch.allclose(untouched, expected, atol=1e-3)  # the check below is not vacuous
    torch.testing.assert_close(got, expected, atol=atol, rtol=0)
    assert (layout == "original" and wrap) == any("epoch" in n and "optimizer_state_dict" in n for n in weights.notes)
    assert weights.n_heads == (A if layout == "lmtransfer" and wrap else None)
    assert (layout == "original") == any("model.n_heads" in note for note in weights.notes)  # the course's says so
    if weights.n_heads is None:  # not recorded: cannot be checked, no error
        check_compatible(weights, dataclasses.replace(CONFIG, n_heads=4), "x")


@pytest.mark.parametrize("layout", ["lmtransfer", "original"])
def test_a_classifier_checkpoint_gives_only_the_base_and_leaves_the_lm_head_as_it_was(tmp_path, layout):
    if layout == "lmtransfer":
        torch.manual_seed(3)
        source = Classifier(CONFIG, 2).eval()
        path, notes, atol = tmp_path / "clf.pt", ["classifier checkpoint"], 0.0
        save_checkpoint(path, source, "classifier", CONFIG, n_classes=2, pooling="last")
        hidden = source.base
    else:  # the course's classifier: a decoder of 2 outputs, sequence-first
        source = _original(outputs=2)
        path, notes, atol = _save_original(tmp_path, source), ["2 outputs", "classification head"], 1e-5
        hidden = lambda ids: source.base(ids.t()).transpose(0, 1)
    weights = read_checkpoint_weights(path)
    assert not weights.has_lm_head and not any(key.startswith("head.") for key in weights.state_dict)
    assert any(all(fragment in note for fragment in notes) for note in weights.notes)
    target = _fresh()
    head_before = target.head.weight.clone()
    load_into_language_model(weights, target)
    assert torch.equal(target.head.weight, head_before)
    with torch.no_grad():
        torch.testing.assert_close(target.base(IDS), hidden(IDS), atol=atol, rtol=0)


# --- mismatches with params.yaml -------------------------------------------------------
@pytest.mark.parametrize("change, expected", [
    ({"vocab_size": 40}, ["base.encoder.weight has 50 token ids but the tokenizer gives 40", "tokenizer.vocab_file"]),
    ({"d_model": 32}, ["base.encoder.weight", "model.d_model: 16"]),
    ({"d_ff": 64}, ["base.transformer_encoder.layers.0.linear1.weight", "model.d_ff: 24"]),
    ({"n_layers": 3}, ["base.transformer_encoder.layers.*", "model.n_layers: 2"]),
])
def test_each_mismatch_names_the_tensor_and_the_params_key(tmp_path, change, expected):
    path = _save_original(tmp_path, _original())
    with pytest.raises(CheckpointImportError) as error:
        load_into_language_model(read_checkpoint_weights(path), _fresh(dataclasses.replace(CONFIG, **change)))
    assert str(error.value).startswith(str(path)) and all(fragment in str(error.value) for fragment in expected)


def test_all_mismatches_are_reported_together_and_another_tokenizer_is_refused_as_init_from(tmp_path):
    path = tmp_path / "lm.pt"
    save_checkpoint(path, _fresh(), "language_model", CONFIG, tokenizer_sha256="a" * 64)
    weights = read_checkpoint_weights(path)
    wrong = ModelConfig(vocab_size=60, d_model=32, n_layers=3, n_heads=4, d_ff=64, dropout=0.1)
    with pytest.raises(CheckpointImportError) as error:
        check_compatible(weights, wrong, str(path))
    lines = str(error.value).splitlines()
    assert "5 mismatches" in lines[0] and str(path) in lines[0] and len(lines) == 6
    body = "\n".join(lines[1:])
    keys = ("tokenizer.vocab_file", "model.d_model: 16", "model.n_layers: 2", "model.d_ff: 24", "model.n_heads: 2")
    assert all(key in body for key in keys)
    assert "base.token_embedding.weight" in body  # our own naming for our own file
    weights.check_tokenizer("a" * 64)  # the same tokenizer: fine
    with pytest.raises(CheckpointImportError, match=r"lm\.pt: trained with another tokenizer than this pipeline's \("
                                                    r"sha256 aaaaaaaaaaaa against bbbbbbbbbbbb\).*pretrain\.init_from"):
        weights.check_tokenizer("b" * 64)


# --- files that cannot be used ---------------------------------------------------------
class Custom:
    pass


@dataclasses.dataclass
class RunsACommand:
    marker: os.PathLike

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _swapped_positions(original):  # cos on even dims, sin on odd
    pe = original.base.pos_encoder.pe
    return torch.stack([pe[..., 1::2], pe[..., 0::2]], dim=-1).flatten(-2)


FINAL_NORM = {"base.transformer_encoder.norm.weight": torch.ones(D), "base.transformer_encoder.norm.bias":
              torch.zeros(D)}  # a final norm the course's encoder does not have
DROPPED = "base.transformer_encoder.layers.1.norm2.bias"
UNUSABLE = {  # file -> what its message says
    "garbage": (lambda tmp, o: b"this is not a checkpoint \x00\x01\x02", ["not a readable PyTorch checkpoint"]),
    "truncated": (lambda tmp, o: _save_original(tmp, o).read_bytes()[:500], ["not a readable PyTorch checkpoint"]),
    "empty": (lambda tmp, o: b"", ["pretrain.init_from"]),
    "missing": (None, ["not found"]),
    "custom": (lambda tmp, o: {"model": Custom()}, ["custom objects", "Custom", "weights_only"]),
    "list": (lambda tmp, o: [torch.zeros(2)], ["holds a list"]),
    "other": (lambda tmp, o: {"model_state_dict": {"encoder.embed.weight": torch.zeros(3, 2),
                                                   "lm_head.weight": torch.zeros(3, 2)}},
              ["unknown checkpoint layout", "encoder.embed.weight", "lm_head.weight"]),
    "swapped": (lambda tmp, o: {"model_state_dict": {**o.state_dict(), "base.pos_encoder.pe": _swapped_positions(o)}},
                ["base.pos_encoder.pe", "positional encoding differs"]),
    "wide": (lambda tmp, o: {"model_state_dict": {**o.state_dict(), "base.pos_encoder.pe": torch.zeros(40, 1, D + 2)}},
             [f"base.pos_encoder.pe has width {D + 2} but base.encoder.weight has width {D}"]),
    "normed": (lambda tmp, o: {"model_state_dict": {**o.state_dict(), **FINAL_NORM}}, list(FINAL_NORM)),
    "incomplete": (lambda tmp, o: {"model_state_dict": {k: v for k, v in o.state_dict().items() if k != DROPPED}},
                   [f"{DROPPED} is missing"]),
    "raw": (lambda tmp, o: pickle.dumps({"weights": [1, 2]}, protocol=4), ["not a readable PyTorch checkpoint"]),
    "command": (lambda tmp, o: {"model": RunsACommand(tmp / "ran")},
                ["holds code or objects this tool will not run (posix.system; module posix is blocked)"]),
}


@pytest.mark.parametrize("name", UNUSABLE)
def test_a_file_that_cannot_be_used_is_refused_naming_it_and_why_without_torchs_warnings_or_advice(tmp_path, name):
    make, fragments = UNUSABLE[name]
    path = tmp_path / f"{name}.pt"
    if make is not None:
        content = make(tmp_path, _original())
        path.write_bytes(content) if isinstance(content, bytes) else torch.save(content, path)
    with warnings.catch_warnings(record=True) as seen, pytest.raises(CheckpointImportError) as error:
        warnings.simplefilter("always")  # torch warns of a raw pickle's protocol before failing
        read_checkpoint_weights(path)
    message = str(error.value)
    assert str(path) in message and all(fragment in message for fragment in fragments) and not seen
    assert "weights_only=False" not in message and "likely succeed" not in message  # no advice to load it unsafely
    assert not (tmp_path / "ran").exists() and (name != "command" or "corrupted" not in message)


def test_a_tokenizer_mismatch_says_what_made_the_tokenizers_differ(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    payload = {"tokenizer_sha256": "0" * 64, "model_config": {"vocab_size": 10}}
    tokenizer = DictionaryTokenizer(["a", "b"])
    elsewhere = tmp_path / "mine"
    elsewhere.mkdir()
    (elsewhere / "spm.model").write_bytes(b"")
    with pytest.raises(TokenizerError, match=f"{elsewhere / 'spm.model'} is empty; pass the folder"):
        check_trained_with(payload, "model.pt", tokenizer, elsewhere)
    (elsewhere / "spm.model").write_bytes(b"another tokenizer")
    with pytest.raises(TokenizerError) as error:
        check_trained_with(payload, "model.pt", tokenizer, elsewhere)
    assert "ran again" not in str(error.value) and str(error.value).endswith("pass the folder of the tokenizer it "
                                                                           "was trained with")
    own = tmp_path / "data" / "tokenized"
    own.mkdir(parents=True)
    (own / "dict.txt").write_text("a 1\n")
    with pytest.raises(TokenizerError, match="the tokenize stage ran again since it was trained"):
        check_trained_with(payload, "model.pt", tokenizer, own)
