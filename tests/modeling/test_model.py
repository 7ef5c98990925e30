"""The Transformer: causality, positions, embedding scale, parameter counts, pooling, generation."""

from __future__ import annotations

import math

import pytest
import torch

from lmtransfer.modeling.model import (
    Classifier,
    LanguageModel,
    ModelConfig,
    PositionalEncoding,
    TransformerBase,
    count_parameters,
    dropout,
    expected_base_parameters,
    pool_last_token,
    pool_mean,
    sinusoidal_positions,
)

TINY = ModelConfig(vocab_size=50, d_model=16, n_layers=2, n_heads=2, d_ff=32, dropout=0.1)


def _tiny(cls, *args, seed: int = 0, config: ModelConfig = TINY, **kwargs):
    torch.manual_seed(seed)
    return cls(config, *args, **kwargs).eval()


# --- causality ------------------------------------------------------------------------
@pytest.mark.parametrize("cls, masked", [(TransformerBase, False), (TransformerBase, True), (LanguageModel, False)],
                         ids=["base", "base-with-padding-mask", "language-model"])
@pytest.mark.parametrize("k", [0, 3, 7, 11])
def test_changing_a_future_token_leaves_earlier_outputs_unchanged(cls, masked, k):
    model = _tiny(cls)
    torch.manual_seed(1)
    ids = torch.randint(4, TINY.vocab_size, (3, 12))
    changed = ids.clone()
    changed[:, k] = 4 + (changed[:, k] - 4 + 7) % (TINY.vocab_size - 4)  # a different non-special token
    assert not torch.equal(ids[:, k], changed[:, k])
    mask = {"padding_mask": torch.zeros_like(ids, dtype=torch.bool)} if masked else {}  # no padding: all False
    with torch.no_grad():
        before, after = model(ids, **mask), model(changed, **mask)
    assert torch.allclose(before[:, :k], after[:, :k], atol=1e-6, rtol=0)
    # position k itself sees the new token, and so do later positions
    assert (before[:, k] - after[:, k]).abs().amax(dim=-1).min() > 1e-4
    if k + 1 < ids.size(1):
        assert (before[:, k + 1 :] - after[:, k + 1 :]).abs().max() > 1e-4


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("training", [False, True], ids=["eval-sdpa", "train-explicit-attention"])
def test_the_layers_draw_and_compute_what_nn_transformer_encoder_layers_do(causal, training, monkeypatch):
    """Same initial weights from a seed, same function (padding and causal masks) as PyTorch's layer stack; in
    training with the dropout masks taken out, the CPU's explicit attention too."""
    monkeypatch.setattr("lmtransfer.modeling.model.dropout", lambda x, p, training: x)
    config = ModelConfig(**{**TINY.to_dict(), "causal": causal})
    ours = _tiny(TransformerBase, config=config).train(training)
    torch.manual_seed(0)
    torch.nn.Embedding(config.vocab_size, config.d_model)  # drawn first in TransformerBase
    layer = torch.nn.TransformerEncoderLayer(config.d_model, config.n_heads, config.d_ff, config.dropout,
                                             batch_first=True)
    theirs = torch.nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False).eval()
    assert ours.layers.state_dict().keys() == theirs.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(ours.layers.state_dict().values(), theirs.state_dict().values()))
    x = torch.randn(3, 7, config.d_model)
    padding = torch.tensor([[False] * 7, [False] * 4 + [True] * 3, [False] * 6 + [True]])
    mask = torch.ones(7, 7, dtype=torch.bool).triu(1) if causal else None
    expected = theirs(x, mask=mask, src_key_padding_mask=padding, is_causal=causal)
    got = ours.layers(x, padding)
    keep = ~padding
    assert torch.allclose(got[keep], expected[keep], atol=1e-5)


def test_cpu_dropout_keeps_one_minus_p_of_the_elements_scaled_and_follows_torchs_seed():
    x = torch.ones(200_000)
    torch.manual_seed(3)
    once = dropout(x, 0.1, training=True)
    torch.manual_seed(3)
    assert torch.equal(once, dropout(x, 0.1, training=True))
    assert abs(once.ne(0).float().mean().item() - 0.9) < 0.005
    assert torch.allclose(once[once.ne(0)], torch.tensor(1 / 0.9))
    assert dropout(x, 0.1, training=False) is x


# --- positional encoding ----------------------------------------------------------------
def _reference_position(pos: int, dim: int, d_model: int) -> float:
    angle = pos / 10000 ** (2 * (dim // 2) / d_model)
    return math.sin(angle) if dim % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("d_model", [8, 16, 200])
def test_sinusoidal_positions_follow_the_sin_cos_formula_and_the_encoding_grows_beyond_its_table(d_model):
    table = sinusoidal_positions(64, d_model)
    assert table.shape == (64, d_model)
    for pos in (0, 1, 2, 5, 17, 63):
        for dim in (0, 1, 2, 3, d_model // 2, d_model // 2 + 1, d_model - 2, d_model - 1):
            expected = _reference_position(pos, dim, d_model)
            assert table[pos, dim].item() == pytest.approx(expected, abs=1e-5), (pos, dim)
    encoding = PositionalEncoding(d_model)
    assert encoding.pe.size(0) == 512
    out = encoding(torch.zeros(2, 600, d_model))
    assert out.shape == (2, 600, d_model) and encoding.pe.size(0) >= 600
    for pos in (0, 511, 512, 599):
        for dim in (0, 1, 6, d_model - 1):
            expected = _reference_position(pos, dim, d_model)
            assert out[1, pos, dim].item() == pytest.approx(expected, abs=1e-4), (pos, dim)
    # the grown table keeps giving the same answer for short inputs
    assert torch.allclose(encoding(torch.zeros(1, 10, d_model))[0], sinusoidal_positions(10, d_model))


# --- embedding scale ----------------------------------------------------------------------
def test_encoder_input_is_embedding_scaled_by_sqrt_d_model_plus_positions():
    base = _tiny(TransformerBase, config=ModelConfig(vocab_size=50, d_model=16, n_layers=1, n_heads=2, d_ff=16,
                                                     dropout=0.0))
    seen = []
    base.layers.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    ids = torch.tensor([[2, 5, 9, 13, 3], [2, 40, 41, 3, 0]])
    with torch.no_grad():
        base(ids)
        expected = base.token_embedding(ids) * 4.0 + sinusoidal_positions(5, 16)
    assert len(seen) == 1 and torch.allclose(seen[0], expected, atol=1e-6)


# --- parameter counts -------------------------------------------------------------------
@pytest.mark.parametrize("vocab, d_model, n_layers, n_heads, d_ff, lab", [
    (100, 200, 4, 2, 200, (988_000, 988_402, 1_008_100)),  # the lab's (base, classifier, language model)
    (50_001, 200, 4, 2, 200, (10_968_200, 10_968_602, 21_018_401)),  # ... with the original French vocabulary
    (37, 24, 3, 4, 24, None), (60, 16, 2, 2, 48, None), (11, 30, 1, 3, 7, None),
])
def test_the_labs_parameter_counts_and_the_closed_form_base_count(vocab, d_model, n_layers, n_heads, d_ff, lab):
    config = ModelConfig(vocab, d_model, n_layers, n_heads, d_ff, dropout=0.1)
    base = TransformerBase(config)
    assert count_parameters(base) == expected_base_parameters(vocab, d_model, n_layers, d_ff)
    if d_ff == d_model:  # the reference shape: 6D^2 + 10D per layer
        assert count_parameters(base.layers.layers[0]) == 6 * d_model**2 + 10 * d_model
    if lab:
        assert (expected_base_parameters(vocab, d_model, n_layers, d_ff), count_parameters(Classifier(config, 2)),
                count_parameters(LanguageModel(config))) == lab


# --- pooling ------------------------------------------------------------------------------
@pytest.mark.parametrize("pool, position", [(pool_last_token, lambda n: n - 1), (pool_mean, lambda n: (n - 1) / 2)])
def test_pooling_reads_only_the_non_padding_positions_of_each_row(pool, position):
    """hidden[b, t] = (t, 100 b, 1): each vector tells its position and row; the mask is True at padding."""
    lengths, width = [3, 6, 1, 4], 6
    hidden = torch.zeros(len(lengths), width, 3)
    hidden[..., 0], hidden[..., 1], hidden[..., 2] = torch.arange(width), 100.0 * torch.arange(4)[:, None], 1.0
    pooled = pool(hidden, torch.arange(width)[None] >= torch.tensor(lengths)[:, None])
    assert torch.allclose(pooled, torch.tensor([[position(n), 100.0 * row, 1.0] for row, n in enumerate(lengths)]))


@pytest.mark.parametrize("pooling, causal", [("last", True), ("mean", True), ("first", False), ("mean", False)])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train-no-dropout"])
def test_a_classifier_reads_the_same_alone_or_right_padded_and_refuses_an_unknown_pooling(pooling, causal, training):
    config = ModelConfig(**{**TINY.to_dict(), "dropout": 0.0 if training else 0.1, "causal": causal})
    model = _tiny(Classifier, 3, pooling=pooling, config=config).train(training)
    short = torch.tensor([[2, 7, 8, 9, 3]])
    batch = torch.tensor([[2, 7, 8, 9, 3, 0, 0, 0], [2, 10, 11, 12, 13, 14, 15, 3]])
    with torch.no_grad():
        alone = model(short)
        padded = model(batch)
        # what a naive pooling (last position, mean over everything, padding not masked) would have read
        hidden = model.base(batch, padding_mask=batch.eq(0))
        naive = model.head({"last": hidden[:, -1], "mean": hidden.mean(1), "first": model.base(batch)[:, 0]}[pooling])
    assert padded.shape == (2, 3) and torch.allclose(alone[0], padded[0], atol=1e-6 if causal else 1e-5)
    assert not torch.allclose(alone[0], naive[0], atol=1e-3)  # the check above can tell the difference
    if pooling == "first":  # BERT's [CLS]: position 0
        assert torch.allclose(padded, model.head(hidden[:, 0]), atol=1e-6)
    with pytest.raises(ValueError, match="max"):
        Classifier(TINY, 2, pooling="max")


# --- generation ---------------------------------------------------------------------------
def test_generation_greedy_is_the_argmax_as_top_one_sampling_stops_after_eos_and_seeded_sampling_repeats():
    model = _tiny(LanguageModel)
    prompt = torch.tensor([[2, 10, 11, 12]])
    greedy = model.generate(prompt, max_new_tokens=6)
    assert greedy.shape == (1, 10) and torch.equal(greedy[:, :4], prompt)
    with torch.no_grad():  # each new token is the argmax of the next-token logits for its prefix
        assert all(greedy[0, t].item() == model(greedy[:, :t])[0, -1].argmax().item() for t in range(4, 10))
    sampled = model.generate(prompt, 6, temperature=1.0, top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(greedy, sampled)
    free = model.generate(prompt, max_new_tokens=8)[0, 4:].tolist()
    k = max(i for i, token in enumerate(free) if token not in free[:i])  # as "eos": the latest token new there
    assert model.generate(prompt, max_new_tokens=8, eos_id=free[k])[0, 4:].tolist() == free[: k + 1]
    runs = [model.generate(prompt[:, :3], 12, temperature=1.5, generator=torch.Generator().manual_seed(seed))
            for seed in (3, 3, 4)]
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_the_embedding_init_is_nn_embeddings_normal_by_default_or_uniform_within_a_tenth():
    def built(init: str) -> Classifier:
        torch.manual_seed(0)
        return Classifier(ModelConfig(500, 20, 2, 2, 20, 0.1, embedding_init=init), 2)

    normal, uniform = built("normal"), built("uniform")
    assert 0.9 < float(normal.base.token_embedding.weight.std()) < 1.1
    weights = uniform.base.token_embedding.weight
    assert float(weights.abs().max()) <= 0.1 and 0.05 < float(weights.std()) < 0.065  # uniform ±0.1: std 0.0577
    torch.manual_seed(0)
    default = Classifier(ModelConfig(500, 20, 2, 2, 20, 0.1), 2)
    assert all(torch.equal(v, default.state_dict()[k]) for k, v in normal.state_dict().items())  # `normal` = before
