"""Same code, params and data give the same numbers on any AVX2 machine: the CPU kernels are pinned.

PyTorch, MKL and oneDNN choose kernels per CPU (AVX-512 here, AVX2 there) and those round
differently, which made the committed results irreproducible on another machine of the same
type. Importing lmtransfer pins them to AVX2; these tests train a small model in fresh
processes and compare the weights bit for bit.
"""

import functools
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import lmtransfer

SRC = Path(__file__).resolve().parents[2] / "src"
TRAIN_A_LITTLE = """
import hashlib, json
import lmtransfer  # pins the kernels before torch loads
import torch
from lmtransfer.modeling.model import LanguageModel, ModelConfig
torch.manual_seed(0)
torch.set_num_threads(1)
model = LanguageModel(ModelConfig(vocab_size=300, d_model=64, n_layers=2, n_heads=2, d_ff=128, dropout=0.1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(4, 300, (8, 33), generator=torch.Generator().manual_seed(1))
for _ in range(5):
    loss = model.loss(ids[:, :-1], ids[:, 1:])
    optimizer.zero_grad(); loss.backward(); optimizer.step()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "weights": digest}))
"""
AVX2 = lmtransfer._cpu_has_avx2()


def _train(**env_overrides: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                        lmtransfer.KERNELS_ENV)}
    env.update(env_overrides, PYTHONPATH=str(SRC))
    out = subprocess.run([sys.executable, "-c", TRAIN_A_LITTLE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@functools.cache
def _as_is() -> dict:
    """One training in the environment as it is, which each test below compares with (a process each: seconds)."""
    return _train()


@pytest.mark.slow
@pytest.mark.skipif(not AVX2, reason="kernel pinning applies to x86-64 CPUs with AVX2")
def test_importing_lmtransfer_pins_the_kernels_to_avx2():
    assert _as_is()["capability"] == "AVX2"
    assert _train(**{lmtransfer.KERNELS_ENV: "native"})["capability"] in {"AVX2", "AVX512"}


@pytest.mark.slow
@pytest.mark.skipif(not AVX2, reason="kernel pinning applies to x86-64 CPUs with AVX2")
def test_a_cpu_without_avx512_gives_the_same_weights_bit_for_bit():
    """MKL_ENABLE_INSTRUCTIONS=AVX2 makes MKL behave as on a CPU that stops at AVX2 (like the other machines)."""
    assert _as_is()["weights"] == _train(MKL_ENABLE_INSTRUCTIONS="AVX2")["weights"]


@pytest.mark.slow
def test_training_twice_gives_the_same_weights():
    assert _as_is()["weights"] == _train()["weights"]


def test_checkpoints_of_equal_weights_are_equal_bytes(tmp_path):
    """dvc.lock records checkpoint hashes: a rerun with the same weights must not change them."""
    import torch

    from lmtransfer.modeling.checkpoint import save_checkpoint
    from lmtransfer.modeling.model import LanguageModel, ModelConfig

    torch.manual_seed(0)
    model = LanguageModel(ModelConfig(vocab_size=50, d_model=8, n_layers=1, n_heads=2, d_ff=8, dropout=0.1))
    save_checkpoint(tmp_path / "a.pt", model, "language_model", model.base.config)
    save_checkpoint(tmp_path / "sub" / "b.pt", model, "language_model", model.base.config)
    digest = [hashlib.sha256((tmp_path / p).read_bytes()).hexdigest() for p in ("a.pt", "sub/b.pt")]
    assert digest[0] == digest[1]
