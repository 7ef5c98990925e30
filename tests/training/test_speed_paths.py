"""Faster ways to compute the same thing (torch.compile, fused AdamW, device copies), and
several jobs sharing one machine's cores.

Each must give what the plain path gives, up to the last bits of float rounding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from lmtransfer.core import sharing
from lmtransfer.core.config import PretrainParams, TrainParams
from lmtransfer.core.errors import ConfigError
from lmtransfer.core.sharing import (
    CHOSEN_ENV,
    JOBS_ENV,
    BusyCores,
    busy_cores_of_others,
    choose_openmp_wait,
    parallel_jobs,
    running_queue_workers,
    thread_share,
)
from lmtransfer.modeling.model import LanguageModel, ModelConfig
from lmtransfer.modeling.runtime import configure, cpu_identity, to_device
from lmtransfer.pretraining.training import pretrain
from lmtransfer.tokens.tokenizer import BOS_ID, EOS_ID
from lmtransfer.training.loop import RunOptions
from lmtransfer.training.optim import make_optimizer

CPU = torch.device("cpu")


PATTERN = np.array([BOS_ID, 5, 6, 7, 8, 9, 10, 11, 12, EOS_ID], dtype=np.uint16)
CONFIG = ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=2, d_ff=64, dropout=0.0)


def _pretrain(compile_steps: bool = False, config: ModelConfig = CONFIG, max_steps: int = 12, **overrides):
    torch.manual_seed(0)
    model = LanguageModel(config)
    params = PretrainParams(max_steps=max_steps, batch_size=8, seq_len=16, lr=3e-3, warmup_steps=2, eval_every=6,
                            eval_batches=2, **overrides)
    result = pretrain(model, np.tile(PATTERN, 100), np.tile(PATTERN, 30), params,
                      RunOptions(CPU, log_every=1, compile_steps=compile_steps))
    return model, result


def test_compiled_pretraining_follows_the_same_curve():
    """train.compile on a CPU: inductor's C++ kernels, the same losses to float rounding."""
    small = ModelConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2, d_ff=16, dropout=0.0)  # compiles faster
    _, eager = _pretrain(config=small, max_steps=4)
    _, compiled = _pretrain(compile_steps=True, config=small, max_steps=4)
    np.testing.assert_allclose([r["train_loss"] for r in compiled.train_log], [r["train_loss"] for r in eager.train_log],
                               rtol=1e-4)


def fused_and_default_adamw_after(steps: int) -> tuple[list[list[torch.Tensor]], list[torch.Tensor]]:
    """The same start and gradients through make_optimizer's fused AdamW (twice) and torch's default loop."""
    torch.manual_seed(0)
    start = [torch.randn(40, 30), torch.randn(30)]
    grads = [[torch.randn_like(p) for p in start] for _ in range(steps)]
    finals = []
    for build in (lambda ps: make_optimizer(ps, 1e-3, 0.01), lambda ps: make_optimizer(ps, 1e-3, 0.01),
                  lambda ps: torch.optim.AdamW(ps, 1e-3, weight_decay=0.01)):
        params = [p.clone().requires_grad_() for p in start]
        optimizer = build(params)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.clone()
            optimizer.step()
        finals.append(params)
    return finals[:2], finals[2]


def test_fused_adamw_is_deterministic_and_matches_the_default_loop_per_vendor():
    """The fused AdamW's guarantee: the same bits run to run on any CPU; the default loop's bits on an Intel CPU
    (where the committed results were first made); within 1e-6 of them elsewhere (an AMD EPYC rounds one
    multiply-add per element apart: 3.7e-9 after 6 steps)."""
    (fused, fused_again), default = fused_and_default_adamw_after(6)
    assert make_optimizer([torch.zeros(2, requires_grad=True)], 1e-3, 0.0).defaults["fused"]
    assert all(torch.equal(a, b) for a, b in zip(fused, fused_again))
    for a, b in zip(fused, default):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    if cpu_identity()["cpu_vendor"] == "GenuineIntel":
        assert all(torch.equal(a, b) for a, b in zip(fused, default))


def test_batches_reach_the_cpu_unchanged():
    batch = (torch.arange(6).view(2, 3), torch.tensor([0, 1]))
    moved = to_device(batch, CPU)
    assert all(torch.equal(a, b) for a, b in zip(moved, batch))


# --- several jobs on one machine ----------------------------------------------------------------------------


def test_each_job_takes_its_share_of_the_cores():
    assert thread_share(1, cores=8) == 8
    assert thread_share(3, cores=8) == 2
    assert thread_share(3, cores=2) == 1  # more jobs than cores: one thread each, never zero


def test_lmtransfer_jobs_sets_the_share_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(JOBS_ENV, "2")
    configure(TrainParams())
    assert torch.get_num_threads() == thread_share(2)
    monkeypatch.setenv(JOBS_ENV, "two")
    with pytest.raises(ConfigError, match="LMTRANSFER_JOBS='two'"):
        parallel_jobs()


def test_an_explicit_thread_count_wins_over_the_share(monkeypatch):
    monkeypatch.setenv(JOBS_ENV, "4")
    configure(TrainParams(num_threads=1))
    assert torch.get_num_threads() == 1


def test_queue_workers_running_on_the_machine_are_counted_inside_a_stage(monkeypatch):
    """Two processes that look like `dvc queue start -j 2`'s workers: a stage counts them (and any real ones)."""
    monkeypatch.delenv(JOBS_ENV, raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    assert parallel_jobs() == 1  # outside a DVC stage nothing is counted
    already = running_queue_workers()  # a queue another job runs on this machine counts too
    workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "exp", "queue-worker",
                                 f"dvc-exp-abc123-{n}@localhost"]) for n in (1, 2)]
    try:
        time.sleep(0.2)
        monkeypatch.setenv("DVC_ROOT", "/somewhere")
        assert running_queue_workers() == already  # counted once per process
        running_queue_workers.cache_clear()  # as a new stage process would count them
        assert running_queue_workers() == already + 2
        assert parallel_jobs() == already + 2
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()


OPENMP_WAIT = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
CHOSE_ALONE = {"GOMP_SPINCOUNT": "50000", CHOSEN_ENV: "GOMP_SPINCOUNT=50000"}  # what a process alone passes on


@pytest.mark.parametrize("jobs, user, chosen", [
    ("1", {}, {"GOMP_SPINCOUNT": "50000"}),  # alone as far as it knows: spin a while, then sleep
    ("3", {}, {"OMP_WAIT_POLICY": "PASSIVE"}),  # known co-tenants: no spin
    ("1", {"GOMP_SPINCOUNT": "300000"}, {"GOMP_SPINCOUNT": "300000"}),  # the user's choice stays
    ("3", {"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE"}),
    ("3", CHOSE_ALONE, {"OMP_WAIT_POLICY": "PASSIVE"}),  # a parent's choice is not the user's: a stage chooses afresh
    ("3", {**CHOSE_ALONE, "GOMP_SPINCOUNT": "5"}, {"GOMP_SPINCOUNT": "5"}),  # ... unless the user changed it since
])
def test_waiting_threads_spin_a_while_and_sleep_when_the_machine_is_shared(jobs, user, chosen):
    env = {k: v for k, v in os.environ.items() if k not in (*OPENMP_WAIT, CHOSEN_ENV)}
    env.update({JOBS_ENV: jobs, **user})
    code = f"import os, lmtransfer; print({{k: os.environ[k] for k in {OPENMP_WAIT!r} if k in os.environ}})"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(chosen)


@pytest.mark.parametrize("others_busy, jobs_env, chosen, watched", [
    (BusyCores(1.2, 0.0), "", {"OMP_WAIT_POLICY": "PASSIVE"}, True),  # others keep a core busy: sleep at once
    (BusyCores(0.1, 0.0), "", {"GOMP_SPINCOUNT": "50000"}, True),  # a quiet machine: spin a while
    (BusyCores(0.1, 1.5), "", {"GOMP_SPINCOUNT": "50000"}, True),  # niced work of this session only: as alone
    (BusyCores(1.2, 1.5), "", {"OMP_WAIT_POLICY": "PASSIVE"}, True),
    (BusyCores(1.2, 0.0), "1", {"GOMP_SPINCOUNT": "50000"}, False),  # the user counted the jobs: not watched
])
def test_a_process_starting_beside_busy_cores_lets_its_waiting_threads_sleep(monkeypatch, others_busy, jobs_env,
                                                                              chosen, watched):
    environ = {k: v for k, v in os.environ.items() if k not in (*OPENMP_WAIT, CHOSEN_ENV, JOBS_ENV)}
    monkeypatch.setattr(os, "environ", {**environ, JOBS_ENV: jobs_env} if jobs_env else environ)
    monkeypatch.setattr(sharing, "busy_at_start", None)
    monkeypatch.delitem(sys.modules, "torch")  # as in a process that has not loaded OpenMP yet
    asked = []
    assert choose_openmp_wait(1, others_busy=lambda: asked.append(True) or others_busy) == chosen
    assert asked == ([True] if watched else [])


def test_with_torch_loaded_the_machine_is_not_watched(monkeypatch):
    """OpenMP read its variables when torch loaded it: watching the machine then would only cost time."""
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in (*OPENMP_WAIT, CHOSEN_ENV,
                                                                                          JOBS_ENV)})
    monkeypatch.setattr(sharing, "busy_at_start", None)
    assert "torch" in sys.modules
    assert choose_openmp_wait(1, others_busy=lambda: pytest.fail("watched")) == {"GOMP_SPINCOUNT": "50000"}


@pytest.mark.slow
@pytest.mark.quiet
def test_cores_kept_busy_by_others_are_seen_and_niced_ones_apart():
    if sharing.niced_self():
        pytest.skip("needs programs at normal priority, and under `nice make test` every process it starts is niced")

    def busy_processes(nice: int, own_session: bool = False) -> list[subprocess.Popen]:
        return [subprocess.Popen(["nice", "-n", str(nice), sys.executable, "-c", "while True: pass"],
                                 start_new_session=own_session) for _ in range(os.cpu_count() or 1)]

    def watch(processes: list[subprocess.Popen], watcher_nice: int = 0) -> BusyCores:
        code = "import json; from lmtransfer.core.sharing import busy_cores_of_others as b; print(json.dumps(b(0.5)))"
        try:
            time.sleep(0.3)  # past their start-up
            if not watcher_nice:
                return busy_cores_of_others(seconds=0.5)
            out = subprocess.run(["nice", "-n", str(watcher_nice), sys.executable, "-c", code], check=True,
                                 capture_output=True, text=True)
            return BusyCores(*json.loads(out.stdout))
        finally:
            for process in processes:
                process.kill()
                process.wait()

    cores = os.cpu_count() or 1
    skip_if_others_are_busy(cores)
    try:
        normal, niced = watch(busy_processes(0)), watch(busy_processes(19))
        assert normal.normal >= 0.5 * cores  # every core busy (less whatever else this machine runs takes of them)
        assert niced.niced >= 0.5 * cores  # the same work, niced: counted apart
        assert niced.normal < normal.normal - 0.4 * cores
        niced_beside_niced = watch(busy_processes(19), watcher_nice=19)
        assert niced_beside_niced.normal >= 0.5 * cores  # they did not ask a niced process to go first
        assert niced_beside_niced.niced == 0
        if sharing.autogroup() is not None:  # sessions share the CPU first: a niced program in another one yields nothing
            niced_elsewhere = watch(busy_processes(19, own_session=True))
            assert niced_elsewhere.normal >= 0.5 * cores and niced_elsewhere.niced < 0.25 * cores
    except AssertionError:
        skip_if_others_are_busy(cores)  # a program that started meanwhile took the cores it measures: not the code
        raise


OTHERS_BUSY_LIMIT = 0.2  # cores kept busy by other programs beyond which a measurement of the CPU says nothing


def skip_if_others_are_busy(cores: int) -> None:
    """A quiet test measures the CPU: with other programs taking cores its numbers are theirs, so it skips in one
    line instead of failing (it still fails on a quiet machine when the code is wrong)."""
    others = busy_cores_of_others(seconds=1.0)
    busy = others.normal + others.niced
    if busy > OTHERS_BUSY_LIMIT:
        pytest.skip(f"skipped: {busy:.1f} of {cores} cores busy with other programs; run it alone (pytest -m quiet)")


@pytest.mark.slow
def test_a_stage_started_beside_busy_cores_says_its_threads_sleep_at_once():
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)
        env = {k: v for k, v in os.environ.items() if k not in (*OPENMP_WAIT, CHOSEN_ENV, JOBS_ENV, "DVC_ROOT")}
        code = ("import os, lmtransfer; from lmtransfer.modeling.runtime import use_share_of_cores; "
                "use_share_of_cores(); print(os.environ['OMP_WAIT_POLICY'])")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert out.stdout.splitlines()[-1] == "PASSIVE"
    assert "waiting threads sleep at once (OMP_WAIT_POLICY=PASSIVE), which changes speed, never a result" in out.stdout
