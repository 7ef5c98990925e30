"""CPU: the same numbers on any AVX2 machine, faster paths that compute the plain one's, jobs sharing the cores."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import lmtransfer
from lmtransfer.core.errors import ConfigError
from lmtransfer.modeling.model import LanguageModel, ModelConfig
from lmtransfer.modeling.runtime import configure, cpu_identity, parallel_jobs, queue_workers, thread_share, to_device
from lmtransfer.pretraining.training import pretrain
from lmtransfer.tokens.tokenizer import BOS_ID, EOS_ID
from lmtransfer.training.loop import RunOptions
from lmtransfer.training.optim import make_optimizer

from shipped import shipped

CPU = torch.device("cpu")

PATTERN = np.array([BOS_ID, 5, 6, 7, 8, 9, 10, 11, 12, EOS_ID], dtype=np.uint16)


@pytest.mark.slow  # inductor compiles C++ kernels: minutes on 2 cores
def test_compiled_pretraining_follows_the_same_curve():
    """train.compile on a CPU: inductor's C++ kernels, the same losses to float rounding."""
    params = shipped("pretrain", max_steps=4, batch_size=8, seq_len=16, lr=3e-3, warmup_steps=2, eval_every=6,
                     eval_batches=2)
    losses = []
    for compile_steps in (False, True):
        torch.manual_seed(0)
        small = ModelConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2, d_ff=16, dropout=0.0)  # compiles fast
        result = pretrain(LanguageModel(small), np.tile(PATTERN, 100), np.tile(PATTERN, 30), params,
                          RunOptions(CPU, log_every=1, compile_steps=compile_steps))
        losses.append([row["train_loss"] for row in result.train_log])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)


def test_fused_adamw_is_deterministic_and_matches_the_default_loop_per_vendor():
    """The same bits run to run on any CPU; the default loop's bits on an Intel CPU (where the committed results were
    made); within 1e-6 of them elsewhere (an AMD EPYC rounds one multiply-add apart: 3.7e-9 after 6 steps)."""
    torch.manual_seed(0)
    start = [torch.randn(40, 30), torch.randn(30)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(6)]
    finals = []
    for fused in (True, True, False):  # the same start and gradients through make_optimizer (twice) and torch's loop
        params = [p.clone().requires_grad_() for p in start]
        optimizer = make_optimizer(params, 1e-3, 0.01) if fused else torch.optim.AdamW(params, 1e-3, weight_decay=0.01)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.clone()
            optimizer.step()
        finals.append(params)
    fused, fused_again, default = finals
    assert make_optimizer([torch.zeros(2, requires_grad=True)], 1e-3, 0.0).defaults["fused"]
    assert all(torch.equal(a, b) for a, b in zip(fused, fused_again))
    for a, b in zip(fused, default):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    if cpu_identity()["cpu_vendor"] == "GenuineIntel":
        assert all(torch.equal(a, b) for a, b in zip(fused, default))


# --- several jobs on one machine, and programs beside ---------------------------------------------------------
def test_each_job_takes_its_share_of_the_cores_set_by_lmtransfer_jobs_unless_a_thread_count_is_given(monkeypatch):
    assert (thread_share(1, cores=8), thread_share(3, cores=8)) == (8, 2)
    assert thread_share(3, cores=2) == 1  # more jobs than cores: one thread each, never zero
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("LMTRANSFER_JOBS", "2")
    configure(shipped("train"))
    assert torch.get_num_threads() == thread_share(2)
    monkeypatch.setenv("LMTRANSFER_JOBS", "4")
    configure(shipped("train", num_threads=1))
    assert torch.get_num_threads() == 1
    batch = (torch.arange(6).view(2, 3), torch.tensor([0, 1]))  # and the batches reach the CPU unchanged
    assert all(torch.equal(a, b) for a, b in zip(to_device(batch, CPU), batch))
    monkeypatch.setenv("LMTRANSFER_JOBS", "two")
    with pytest.raises(ConfigError, match="LMTRANSFER_JOBS='two'"):
        parallel_jobs()


def test_queue_workers_running_on_the_machine_are_counted_inside_a_stage(monkeypatch):
    """Two processes that look like `dvc queue start -j 2`'s workers: a stage counts them (and any real ones)."""
    for name in ("LMTRANSFER_JOBS", "DVC_ROOT", "DVC_EXP_NAME"):
        monkeypatch.delenv(name, raising=False)
    already = queue_workers()  # a queue another job runs on this machine counts too
    workers = [subprocess.Popen([sys.executable, "-c", "import time\ntime.sleep(60)", "exp", "queue-worker",
                                 f"dvc-exp-abc123-{n}@localhost"]) for n in (1, 2)]
    try:
        time.sleep(0.2)
        assert parallel_jobs() == 1  # outside a DVC stage nothing is counted
        monkeypatch.setenv("DVC_ROOT", "/somewhere")
        assert queue_workers() == already + 2 and parallel_jobs() == already + 2
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()


OPENMP_WAIT = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


@pytest.mark.parametrize("others_busy, user, chosen", [
    (1.2, {}, {"OMP_WAIT_POLICY": "PASSIVE"}),  # others keep a core busy: sleep at once
    (0.1, {}, {"GOMP_SPINCOUNT": lmtransfer.SPIN_COUNT}),  # a quiet machine: spin a short while
    (1.2, {"GOMP_SPINCOUNT": "300000"}, {}),  # the user's choice stays
    (0.1, {"OMP_WAIT_POLICY": "ACTIVE"}, {}),
    (None, {}, {}),  # torch loaded: OpenMP read its variables already, watching the machine would only cost time
])
def test_a_process_starting_beside_busy_cores_lets_its_waiting_threads_sleep(monkeypatch, others_busy, user, chosen):
    environ = {k: v for k, v in os.environ.items() if k not in OPENMP_WAIT}
    monkeypatch.setattr(os, "environ", {**environ, **user})
    if others_busy is None:
        assert "torch" in sys.modules
    else:
        monkeypatch.delitem(sys.modules, "torch")  # as in a process that has not loaded OpenMP yet
    watch = (lambda: pytest.fail("watched")) if others_busy is None else (lambda: others_busy)
    assert lmtransfer.choose_openmp_wait(others_busy=watch) == chosen
    assert {k: os.environ[k] for k in OPENMP_WAIT if k in os.environ} == (chosen or user)


def _wait_chosen_by_a_fresh_process() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_WAIT}
    chosen = f"{{k: os.environ[k] for k in {OPENMP_WAIT!r} if k in os.environ}}"
    code = f"import json, os, lmtransfer\nprint(json.dumps({chosen}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.slow
@pytest.mark.quiet
def test_a_process_started_beside_busy_cores_sleeps_at_once_and_alone_spins():
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(os.cpu_count() or 1)]  # as `yes > /dev/null` in another terminal
    try:
        time.sleep(0.3)  # past their start-up
        beside = _wait_chosen_by_a_fresh_process()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert beside == {"OMP_WAIT_POLICY": "PASSIVE"}
    if lmtransfer.cores_busy_with_others(seconds=1.0) > 0.2:
        pytest.skip("other programs keep the cores busy: run it alone (pytest -m quiet)")
    assert _wait_chosen_by_a_fresh_process() == {"GOMP_SPINCOUNT": lmtransfer.SPIN_COUNT}


# --- fresh processes train to the same weights, bit for bit, on any AVX2 machine (AVX-512 kernels round apart) --
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
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "weights": digest}))
"""


def _train(**env_overrides: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS",
                        lmtransfer.KERNELS_ENV)}
    env.update(env_overrides, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    out = subprocess.run([sys.executable, "-c", TRAIN_A_LITTLE], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


_as_is = functools.cache(_train)  # one training in the environment as it is, which the tests below compare with


@pytest.mark.slow
@pytest.mark.skipif(not lmtransfer._cpu_has_avx2(), reason="kernel pinning applies to x86-64 CPUs with AVX2")
def test_importing_lmtransfer_pins_the_kernels_to_avx2_so_a_cpu_without_avx512_gives_the_same_weights():
    """MKL_ENABLE_INSTRUCTIONS=AVX2 makes MKL behave as on a CPU that stops at AVX2 (like the other machines)."""
    assert _as_is()["capability"] == "AVX2"
    assert _train(**{lmtransfer.KERNELS_ENV: "native"})["capability"] in {"AVX2", "AVX512"}
    assert _as_is()["weights"] == _train(MKL_ENABLE_INSTRUCTIONS="AVX2")["weights"]


@pytest.mark.slow
def test_training_twice_gives_the_same_weights():
    assert _as_is()["weights"] == _train()["weights"]
