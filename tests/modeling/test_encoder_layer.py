"""Our encoder layer against PyTorch's: the same weights from a seed, the same function, a cheaper dropout with
nn.Dropout's distribution, and denormals flushed in every CPU thread of a stage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lmtransfer.modeling.model import Dropout, ModelConfig, TransformerBase, attention_with_dropout_on_cpu, causal_mask

REPO = Path(__file__).resolve().parents[2]


def _pytorch_base(config: ModelConfig) -> nn.Module:
    """The base as it was built from nn.TransformerEncoderLayer: the reference our layer must equal."""
    layer = nn.TransformerEncoderLayer(config.d_model, config.n_heads, config.d_ff, config.dropout,
                                       activation="relu", batch_first=True, norm_first=False)
    return nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)


def _pytorch_forward(encoder: nn.Module, x: torch.Tensor, padding: torch.Tensor | None, causal: bool):
    if not causal:
        return encoder(x, src_key_padding_mask=padding)
    mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).triu(1)
    return encoder(x, mask=mask, src_key_padding_mask=padding, is_causal=True)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [True, False])
def test_our_layers_start_from_pytorchs_weights_and_compute_the_same_function(causal, padded):
    config = ModelConfig(vocab_size=60, d_model=24, n_layers=3, n_heads=4, d_ff=40, dropout=0.0, causal=causal)
    torch.manual_seed(3)
    nn.Embedding(config.vocab_size, config.d_model)  # our base draws its embedding first, then its layers
    reference = _pytorch_base(config)
    torch.manual_seed(3)
    ours = TransformerBase(config).layers
    theirs, mine = reference.state_dict(), ours.state_dict()
    assert list(theirs) == list(mine)
    assert all(torch.equal(theirs[name], mine[name]) for name in theirs)

    torch.manual_seed(4)
    x = torch.randn(5, 11, config.d_model, requires_grad=True)
    padding = torch.zeros(5, 11, dtype=torch.bool)
    if padded:
        padding[1, 6:] = True
        padding[3, 2:] = True
    mask = padding if padded else None
    for module in (reference, ours):
        module.train()
    expected = _pytorch_forward(reference, x, mask, causal)
    got = ours(x, mask)
    keep = ~padding  # padding rows are never read downstream
    torch.testing.assert_close(got[keep], expected[keep], rtol=1e-5, atol=1e-5)
    (expected[keep].square().sum()).backward()
    expected_grads = [p.grad.clone() for p in reference.parameters()]
    (got[keep].square().sum()).backward()
    for ref_grad, p in zip(expected_grads, ours.parameters()):
        torch.testing.assert_close(p.grad, ref_grad, rtol=1e-4, atol=1e-5)


def test_dropout_keeps_one_minus_p_and_scales_the_kept_by_one_over_one_minus_p():
    torch.manual_seed(0)
    dropout = Dropout(0.25).train()
    x = torch.ones(400_000)
    y = dropout(x)
    kept = y.ne(0)
    assert abs(kept.float().mean().item() - 0.75) < 0.003  # binomial sd here is 0.0007
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.75))
    assert torch.equal(dropout.eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)


@pytest.mark.slow
def test_compiled_dropout_keeps_nn_dropouts_distribution_in_one_graph():
    """Under train.compile the draw is F.dropout's (inductor's generator), not a graph break per NumPy draw."""
    torch._dynamo.reset()
    compiled = torch.compile(Dropout(0.5).train(), fullgraph=True)  # fullgraph: a graph break would raise
    y = compiled(torch.ones(200_000))
    kept = y.ne(0)
    assert abs(kept.float().mean().item() - 0.5) < 0.01
    assert torch.equal(y[kept], torch.full_like(y[kept], 2.0))


def test_dropout_masks_are_reproducible_from_the_seed_and_differ_between_calls():
    dropout = Dropout(0.5).train()
    x = torch.ones(1000)
    torch.manual_seed(7)
    first, second = dropout(x), dropout(x)
    torch.manual_seed(7)
    assert torch.equal(dropout(x), first)
    assert not torch.equal(first, second)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [True, False])
def test_attention_with_cpu_dropout_computes_sdpas_function(causal, padded):
    """At p = 0 the training path's own attention equals SDPA, a query with no allowed key included (zeros)."""
    torch.manual_seed(5)
    query, key, value = (torch.randn(3, 2, 7, 5, requires_grad=True) for _ in range(3))
    allowed = None
    if padded:
        allowed = torch.ones(3, 1, 7, 7, dtype=torch.bool)
        allowed[0, :, :, 5:] = False
        allowed[1, 0, 2] = False  # query 2 of text 1 may attend to nothing
        if causal:
            allowed &= ~causal_mask(7)
    ours = attention_with_dropout_on_cpu(query, key, value, allowed, causal, 0.0)
    theirs = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed, is_causal=causal and not padded)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    if padded:
        assert torch.equal(ours[1, :, 2], torch.zeros(2, 5))
    our_grads = torch.autograd.grad(ours.square().sum(), (query, key, value))
    their_grads = torch.autograd.grad(theirs.square().sum(), (query, key, value))
    for got, expected in zip(our_grads, their_grads):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_attention_dropout_drops_weights_and_keeps_their_expected_sum():
    """Equal scores give each of T keys weight 1/T; with value = 1 a query's output is the sum of its kept
    weights, kept/(T (1-p)): 1 on average, never exactly 1 for every query, identical from the same seed."""
    query = key = torch.zeros(64, 4, 32, 8)
    value = torch.ones(64, 4, 32, 8)
    torch.manual_seed(9)
    out = attention_with_dropout_on_cpu(query, key, value, None, False, 0.5)[..., 0]
    kept = out * 32 * 0.5
    assert torch.allclose(kept, kept.round(), atol=1e-4)  # whole numbers of kept keys
    assert abs(out.mean().item() - 1.0) < 0.01  # 8,192 queries of 32 keys each: sd of the mean 0.002
    assert out.std().item() > 0.1
    torch.manual_seed(9)
    assert torch.equal(attention_with_dropout_on_cpu(query, key, value, None, False, 0.5)[..., 0], out)


def test_a_training_layer_on_the_cpu_uses_its_own_attention_dropout(monkeypatch):
    calls = []
    monkeypatch.setattr("lmtransfer.modeling.model.attention_with_dropout_on_cpu",
                        lambda *args: calls.append(args[-1]) or attention_with_dropout_on_cpu(*args))
    base = TransformerBase(ModelConfig(vocab_size=30, d_model=8, n_layers=2, n_heads=2, d_ff=8, dropout=0.2))
    ids = torch.randint(1, 30, (2, 5))
    base.eval()(ids)
    assert calls == []  # evaluation: SDPA's fused kernels
    base.train()(ids)
    assert calls == [0.2, 0.2]


PROBE = """
import runpy, sys
sys.path.insert(0, "stages")  # as when the stage runs as a script: its folder first
sys.argv = [{stage!r}, *{args!r}]  # the stage script parses its command line as it loads
runpy.run_path({stage!r}, run_name="imported")  # the stage's imports and module code, not its main
from lmtransfer.core.config import TrainParams
from lmtransfer.modeling.runtime import configure, denormals_flushed
configure(TrainParams(num_threads=2))
print(denormals_flushed())
"""


@pytest.mark.parametrize(("stage", "args"), [
    ("stages/pretrain.py", ["--seed", "0"]),
    ("stages/finetune.py", ["--init", "scratch", "--pretrain-seed", "0", "--seed", "0"]),
    ("stages/translation/finetune.py", ["--init", "scratch", "--seed", "0"]),
])
@pytest.mark.slow
def test_a_training_stage_flushes_denormals_in_every_cpu_thread(stage, args):
    """The flag is per thread and torch's workers copy it only when they start: configure() must come before
    anything a stage does in parallel (its imports included)."""
    result = subprocess.run([sys.executable, "-c", PROBE.format(stage=stage, args=args)], capture_output=True, text=True,
                            check=True, cwd=REPO)  # the stage's paths are relative to the repository
    assert result.stdout.split()[-1] == "True"


@pytest.mark.slow
def test_the_probe_sees_a_thread_that_started_before_the_flush():
    late = ("import torch\ntorch.set_num_threads(2)\n(torch.ones(1 << 20) * 2).sum()\n"
            "from lmtransfer.modeling.runtime import denormals_flushed, flush_denormals\nflush_denormals()\n"
            "print(denormals_flushed())")
    result = subprocess.run([sys.executable, "-c", late], capture_output=True, text=True, check=True)
    assert result.stdout.split()[-1] == "False"
