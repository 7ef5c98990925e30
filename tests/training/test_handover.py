"""A training that hands itself over to a new process (another OpenMP wait) ends as if it had never stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from lmtransfer.core import sharing
from lmtransfer.core.sharing import BusyCores, CpuClock, NeighbourWatch, wait_for

SCRIPT = textwrap.dedent("""
    import hashlib, json, os, sys
    import lmtransfer
    import numpy as np, torch
    from lmtransfer.core import sharing
    from lmtransfer.classification import finetune
    from lmtransfer.training.loop import RunOptions
    from lmtransfer.classification.config import FinetuneParams
    from lmtransfer.core.config import PretrainParams
    from lmtransfer.harness.process_exit import end_process
    from lmtransfer.harness.tracking import log_metrics, stage_run
    from lmtransfer.modeling.model import Classifier, LanguageModel, ModelConfig
    from lmtransfer.modeling.runtime import use_share_of_cores
    from lmtransfer.pretraining import training as pretraining
    from lmtransfer.training import loop
    from lmtransfer.training.resume import Snapshots

    from lmtransfer.tokens.id_files import LabeledSplit

    MODE, HAND_OVER_AT = sys.argv[1], int(sys.argv[2])  # pretrain or finetune; the look that sees a neighbour (0: none)

    class Watch:  # a neighbour seen from step HAND_OVER_AT on
        saw = sharing.BusyCores(1.0, 0.0)
        def __init__(self):
            self.looks = 0
        @property
        def wanted(self):
            self.looks += 1
            return "sleep" if HAND_OVER_AT and self.looks >= HAND_OVER_AT else None
        def stop(self):
            pass

    if not sharing.handed_over():  # the first process sees the neighbour; the one it hands over to, none
        loop.neighbour_watch = lambda *_: Watch()
    print("pid", os.getpid(), "wait", sharing.chosen_wait, flush=True)
    use_share_of_cores()  # as a stage does (`configure`): says what the process it took over from saw
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.1)
    snapshots = Snapshots(MODE, "same", 100 if MODE == "pretrain" else 1, root=__import__("pathlib").Path("snap"))
    with stage_run(MODE, {}) as run:
        if MODE == "pretrain":
            model, ids = LanguageModel(config), np.tile(np.arange(5, 40, dtype=np.uint16), 60)
            params = shipped("pretrain", seq_len=8, batch_size=4, max_steps=12, warmup_steps=2, eval_every=5, eval_batches=2)
            options = pretraining.LoopOptions(log_every=1, log_metrics=log_metrics, snapshots=snapshots)
            log = pretraining.pretrain(model, ids, ids[:200], params, options).train_log
        else:  # 8 batches an epoch
            model, texts = Classifier(config, 2), np.random.default_rng(0)
            lengths = texts.integers(3, 12, 120)
            split = LabeledSplit(texts.integers(5, 40, lengths.sum()).astype(np.uint16),
                                 np.concatenate([[0], np.cumsum(lengths)]), texts.integers(0, 2, 120))
            params = shipped("finetune", epochs=3, batch_size=16, lr=3e-3, max_len=16, warmup_steps=3)
            options = RunOptions(desc="finetune", on_epoch=lambda row: log_metrics(row, row["epoch"]),
                                 snapshots=snapshots)
            log = finetune.finetune(model, split, split, params, options).history
        run_id = run.info.run_id
    digest = hashlib.sha256(b"".join(t.numpy().tobytes() for t in model.state_dict().values())).hexdigest()
    print("done", json.dumps({"run_id": run_id, "digest": digest, "log": log}), flush=True)
    end_process(0)  # as a stage ends
""")


def _train(folder, hand_over_at: int, mode: str = "pretrain") -> tuple[list[str], dict]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": "", "DVC_ROOT": str(folder), "LMTRANSFER_PIPELINE_ID": "one",
           "TQDM_DISABLE": "1"}
    for name in (sharing.HANDOVER_ENV, "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", sharing.CHOSEN_ENV, sharing.JOBS_ENV):
        env.pop(name, None)
    (folder / "train.py").write_text(SCRIPT)
    out = subprocess.run([sys.executable, "train.py", mode, str(hand_over_at)], cwd=folder, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    return lines, json.loads(next(line for line in lines if line.startswith("done "))[5:])


@pytest.mark.slow
def test_a_handed_over_training_ends_bit_for_bit_in_the_same_process_id_and_mlflow_run(tmp_path):
    from mlflow import MlflowClient

    (tmp_path / "plain").mkdir()
    (tmp_path / "handed").mkdir()
    _, plain = _train(tmp_path / "plain", hand_over_at=0)
    lines, handed = _train(tmp_path / "handed", hand_over_at=4)
    starts = [line.split() for line in lines if line.startswith("pid ")]
    assert len(starts) == 2 and starts[0][1] == starts[1][1]  # one process id: DVC sees one stage
    assert starts[1][3] == "sleep"  # the new process waits the way the watch asked for
    said = [line for line in lines if line.startswith("neighbours:")]
    assert len(said) == 2 and "handing the training over at step 4 of 12" in said[0] and "1.0 of" in said[0]
    assert handed["digest"] == plain["digest"]
    assert handed["log"] == plain["log"]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'handed' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("lmtransfer").experiment_id],
                              filter_string="attributes.run_name = 'pretrain'")
    assert [run.info.run_id for run in runs] == [handed["run_id"]]  # the run went on: no second run
    assert runs[0].info.status == "FINISHED"
    history = client.get_metric_history(handed["run_id"], "train_loss")
    assert sorted(m.step for m in history) == list(range(1, 13))  # each step once: nothing logged twice


@pytest.mark.slow
def test_a_fine_tuning_handed_over_mid_epoch_ends_bit_for_bit_in_one_mlflow_run(tmp_path):
    from mlflow import MlflowClient

    (tmp_path / "plain").mkdir()
    (tmp_path / "handed").mkdir()
    _, plain = _train(tmp_path / "plain", hand_over_at=0, mode="finetune")
    lines, handed = _train(tmp_path / "handed", hand_over_at=11, mode="finetune")  # epoch 1: 8 batches + its end
    said = [line for line in lines if line.startswith("neighbours:")]
    assert "handing the training over at step 10 of 24, batch 2 of 8 in finetune epoch 2/3" in said[0]
    assert "resumed from the snapshot at batch 2 of epoch 2 of 3" in "\n".join(lines)
    assert handed["digest"] == plain["digest"] and handed["log"] == plain["log"]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'handed' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("lmtransfer").experiment_id],
                              filter_string="attributes.run_name = 'finetune'")
    assert [run.info.run_id for run in runs] == [handed["run_id"]] and runs[0].info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(handed["run_id"], "val_accuracy")) == [1, 2, 3]


def _clock(at: float, normal: float, niced: float, own: float, here: dict | None = None) -> CpuClock:
    """A reading; `here`: niced processes of this session (None: no autogroups, every niced one yields)."""
    return CpuClock(at, normal, niced, own, here)


def test_niced_time_yields_only_where_it_is_seen_in_this_session(monkeypatch):
    monkeypatch.setattr(sharing, "niced_self", lambda: False)
    before = _clock(0.0, 10.0, 5.0, 4.0, {7: 1.0})
    # 2 s: 3 of its own, 1 other normal, 3 niced: 0.5 by process 7 of this session, 1.0 by process 9 of this
    # session that started since, 1.5 by others (another session, or processes that came and went)
    after = _clock(2.0, 14.0, 8.0, 7.0, {7: 1.5, 9: 1.0})
    busy = after.busy_since(before)
    assert busy.normal == pytest.approx((1.0 + 1.5) / 2) and busy.niced == pytest.approx(1.5 / 2)
    no_groups = _clock(2.0, 14.0, 8.0, 7.0, None).busy_since(_clock(0.0, 10.0, 5.0, 4.0, None))
    assert no_groups == pytest.approx(BusyCores(1.0 / 2, 3.0 / 2))  # without autogroups every niced program yields


@pytest.mark.parametrize(("busy", "wait"), [
    (BusyCores(0.1, 0.1), "spin"), (BusyCores(0.1, 0.9), "spin"), (BusyCores(0.6, 0.9), "sleep"),
])
def test_the_wait_fits_what_others_keep_busy(busy, wait):
    assert wait_for(busy) == wait


def _watch(monkeypatch, chosen: str, readings: list[tuple[float, float]]) -> NeighbourWatch:
    """A watch over readings of (others' normal, others' niced) cores, one per second."""
    monkeypatch.setattr(sharing, "chosen_wait", chosen)
    monkeypatch.setattr(sharing, "niced_self", lambda: False)
    clocks = iter([_clock(0.0, 0.0, 0.0, 0.0)] + [
        _clock(float(i + 1), sum(n for n, _ in readings[: i + 1]), sum(m for _, m in readings[: i + 1]), 0.0)
        for i in range(len(readings))])
    return NeighbourWatch(every=1.0, patience=2, clock=lambda: next(clocks))


def test_a_spinning_process_asks_to_sleep_once_a_neighbour_stays_two_readings(monkeypatch):
    watch = _watch(monkeypatch, "spin", [(1.0, 0.0), (0.0, 0.0), (0.9, 0.0), (1.1, 0.0)])
    assert [watch.look() for _ in range(4)] == [None, None, None, "sleep"]
    assert watch.saw == BusyCores(1.0, 0.0)


def test_niced_neighbours_of_its_own_session_leave_a_spinning_process_spinning(monkeypatch):
    watch = _watch(monkeypatch, "spin", [(0.1, 0.9), (0.0, 1.8), (0.1, 0.9), (0.0, 0.0)])
    assert [watch.look() for _ in range(4)] == [None] * 4


def test_two_readings_must_ask_for_the_same_change(monkeypatch):
    watch = _watch(monkeypatch, "spin", [(0.1, 0.9), (0.9, 0.0), (0.1, 0.9), (0.8, 0.0), (1.0, 0.0)])
    assert [watch.look() for _ in range(5)] == [None, None, None, None, "sleep"]


def test_a_sleeping_process_beside_niced_programs_of_its_session_only_spins_again(monkeypatch):
    watch = _watch(monkeypatch, "sleep", [(0.1, 0.8), (0.0, 0.6)])
    assert [watch.look() for _ in range(2)] == [None, "spin"]


def test_a_sleeping_process_asks_to_spin_once_the_machine_is_quiet(monkeypatch):
    watch = _watch(monkeypatch, "sleep", [(1.0, 0.0), (0.1, 0.0), (0.0, 0.05)])
    assert [watch.look() for _ in range(3)] == [None, None, "spin"]


def test_no_watch_when_the_user_chose_the_wait_or_outside_a_stage(monkeypatch, tmp_path):
    from lmtransfer.training.handover import neighbour_watch
    from lmtransfer.training.resume import Snapshots

    cpu, on = torch.device("cpu"), Snapshots("pretrain", "same", every=100, root=tmp_path)
    monkeypatch.setenv("DVC_ROOT", "/somewhere")
    monkeypatch.delenv("LMTRANSFER_WATCH", raising=False)
    monkeypatch.setattr(sharing, "chosen_wait", None)  # OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the user
    assert neighbour_watch(on, cpu) is None
    monkeypatch.setattr(sharing, "chosen_wait", "spin")
    assert neighbour_watch(Snapshots("pretrain", "same", every=0, root=tmp_path), cpu) is None  # resume off
    assert neighbour_watch(None, cpu) is None  # nothing to hand over with
    monkeypatch.delenv("DVC_ROOT")
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    assert neighbour_watch(on, cpu) is None  # a notebook, the CLI, the tests
    monkeypatch.setenv("LMTRANSFER_WATCH", "1")
    watch = neighbour_watch(on, cpu)
    assert watch is not None
    watch.stop()


def test_a_handed_over_process_takes_the_wait_it_was_given(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setenv(sharing.HANDOVER_ENV, json.dumps({"wait": "sleep", "saw": "x", "count": 1, "run_id": None}))
    assert sharing.choose_openmp_wait(1, others_busy=lambda: pytest.fail("watched")) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert sharing.chosen_wait == "sleep"
