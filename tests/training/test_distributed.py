"""Several processes (train.nproc, DDP over gloo) train as one does, step for step, within float rounding."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from lmtransfer.classification.finetune import finetune
from lmtransfer.modeling.model import Classifier, LanguageModel, ModelConfig
from lmtransfer.pretraining.objectives import Objective
from lmtransfer.pretraining.training import adapt_to_task, pretrain
from lmtransfer.tokens.id_files import LabeledSplit
from lmtransfer.training import distributed
from lmtransfer.training.loop import RunOptions

from loopback import free_port
from shipped import shipped

CPU = torch.device("cpu")
PAD, UNK, BOS, EOS, MASK, V = 0, 1, 2, 3, 4, 40
META = {"pad_id": PAD, "unk_id": UNK, "bos_id": BOS, "eos_id": EOS, "mask_id": MASK, "vocab_size": V}
RTOL = 1e-4


def _config(causal: bool = True) -> ModelConfig:
    return ModelConfig(V, d_model=16, n_layers=1, n_heads=2, d_ff=16, dropout=0.0, causal=causal)


def _documents(n_tokens: int, seed: int) -> np.ndarray:  # BOS ... EOS documents, `n_tokens` ids in all
    rng = np.random.default_rng(seed)
    stream: list[int] = []
    while len(stream) < n_tokens:
        stream += [BOS, *rng.integers(5, V, size=int(rng.integers(3, 9))).tolist(), EOS]
    return np.array(stream[:n_tokens], dtype=np.uint16)


def _split(n: int, seed: int) -> LabeledSplit:
    rng = np.random.default_rng(seed)
    sequences = [np.array([BOS, *rng.integers(5, V, size=int(rng.integers(2, 9))), EOS], dtype=np.uint16)
                 for _ in range(n)]
    labels = np.array([int(s[1] > V // 2) for s in sequences], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences])]).astype(np.int64)
    return LabeledSplit(np.concatenate(sequences), offsets, labels)


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights less the key biases, whose gradient (zero but for rounding noise) Adam scales up to full steps."""
    state = {key: value.detach().clone() for key, value in model.state_dict().items()}
    for key in [key for key in state if key.endswith("self_attn.in_proj_bias")]:
        query, _, value = state.pop(key).chunk(3)
        state[key.replace("in_proj", "query_and_value")] = torch.cat([query, value])
    return state


def train_all() -> dict:
    """Every case, in this process (in a process group if one runs): 5 rows split 3 + 2, a last 1 leaves rank 1 none."""
    out = {}
    # next-token pretraining: 8k + 8 tokens make 36 windows of 8 at any offset -> batches 5 x 7 + 1, 10 steps
    torch.manual_seed(0)
    lm = LanguageModel(_config())
    params = shipped("pretrain", max_steps=10, batch_size=5, seq_len=8, eval_every=5, eval_batches=2, warmup_steps=2,
                     lr=3e-3)
    result = pretrain(lm, _documents(296, 0), _documents(200, 1), params, RunOptions(CPU, seed=0, log_every=1))
    out["clm"] = (result.train_log, result.valid_log, _state(lm))
    # masked tokens + next-sentence prediction, then the adaptation phase (masked tokens only: the NSP head idles)
    torch.manual_seed(1)
    params = shipped("pretrain", objective="mlm", nsp=True, max_steps=6, batch_size=5, seq_len=16, eval_every=3,
                     eval_batches=2, warmup_steps=2, lr=3e-3, adapt_epochs=1)
    objective = Objective.from_params(params, META)
    mlm = objective.build_model(_config(causal=False))
    options = RunOptions(CPU, seed=0, log_every=1)
    first = pretrain(mlm, _documents(600, 2), _documents(300, 3), params, options, objective)
    second = adapt_to_task(mlm, _documents(150, 4), _documents(120, 5), params, options, objective)
    out["mlm_nsp"] = (first.train_log + second.train_log, first.valid_log + second.valid_log, _state(mlm))
    # fine-tuning: 23 texts in batches of 5 -> the last batch has 3
    torch.manual_seed(2)
    classifier = Classifier(_config(), 2, "mean")
    tuned = finetune(classifier, _split(23, 6), _split(12, 7), shipped("finetune", epochs=2, batch_size=5, lr=3e-3,
                     max_len=12, warmup_steps=2), RunOptions(CPU, seed=0))
    out["finetune"] = (tuned.history, [], _state(classifier))
    return out


def _worker(rank: int, size: int, port: int, folder: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(size), LOCAL_WORLD_SIZE=str(size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    distributed.start(shipped("train", num_threads=size), CPU)  # 1 thread each
    assert torch.get_num_threads() == 1 and distributed.world() == distributed.World(rank, size)
    result = train_all()
    torch.save(result, Path(folder) / f"rank{rank}.pt")


@pytest.fixture(scope="module")
def one_and_two_processes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    mp.start_processes(_worker, args=(2, free_port(), str(folder)), nprocs=2, join=True, start_method="spawn")
    single = train_all()
    return single, [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["clm", "mlm_nsp", "finetune"])
def test_two_processes_train_like_one_step_for_step(one_and_two_processes, case):
    single, (rank0, rank1) = one_and_two_processes
    train_log, valid_log, weights = single[case]
    for ranked in (rank0, rank1):  # every rank holds the same model and the same (global) measurements
        other_train, other_valid, other_weights = ranked[case]
        assert [row.keys() for row in other_train] == [row.keys() for row in train_log]
        for ours, theirs in zip(train_log + valid_log, other_train + other_valid, strict=True):
            for key, value in ours.items():
                assert theirs[key] == pytest.approx(value, rel=RTOL, abs=1e-6), (case, key, ours)
        for key, value in weights.items():
            torch.testing.assert_close(other_weights[key], value, rtol=RTOL, atol=1e-5, msg=f"{case}: {key}")


@pytest.mark.parametrize("rows, size, shares", [(5, 2, [(0, 3), (3, 5)]), (1, 2, [(0, 1), (1, 1)]),
                                                 (7, 3, [(0, 3), (3, 5), (5, 7)])])
def test_rows_are_shared_contiguously_the_first_ranks_taking_the_extra_ones(rows, size, shares):
    assert [distributed.share(rows, distributed.World(r, size)) for r in range(size)] == [slice(*s) for s in shares]


def test_one_process_changes_nothing():
    """train.nproc: 1 (no launcher): no relaunch, no process group, the same device."""
    distributed.launch(1)
    assert distributed.start(shipped("train"), CPU) == CPU and distributed.world() == distributed.World()


FAILING_STAGE = """
import sys
sys.path[:0] = [{src!r}, {tests!r}]
from shipped import shipped
from lmtransfer.training import distributed
from lmtransfer.core.errors import ConfigError
from lmtransfer.harness.stage import stage_main

@stage_main("tiny")
def main():
    distributed.launch(2)
    distributed.start(shipped("train"), distributed.torch.device("cpu"))
    distributed.torch.distributed.barrier()  # the group is up on every rank: the failure is not a start-up race
    if distributed.world().rank == 1:
        raise ConfigError("pretrain.lr: rank 1 does not like it")
    distributed.torch.distributed.barrier()

main()
"""


@pytest.mark.slow
def test_a_failing_process_stops_the_job_with_the_stage_s_one_line_error(tmp_path):
    script = tmp_path / "tiny.py"
    root = Path(__file__).parents[2]
    script.write_text(textwrap.dedent(FAILING_STAGE.format(src=str(root / "src"), tests=str(root / "tests"))))
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert "tiny: error: pretrain.lr: rank 1 does not like it" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
