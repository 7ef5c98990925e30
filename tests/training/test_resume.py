"""Resume snapshots: an interrupted training run, resumed, ends bit for bit where an uninterrupted one does."""

from __future__ import annotations

import functools
import random
from dataclasses import replace

import numpy as np
import pytest
import torch

from lmtransfer.classification.finetune import finetune
from lmtransfer.modeling.model import Classifier, LanguageModel, ModelConfig
from lmtransfer.pretraining.objectives import Objective
from lmtransfer.pretraining.training import adapt_to_task, adaptation_steps, pretrain
from lmtransfer.tokens.id_files import LabeledSplit
from lmtransfer.tokens.tokenizer import BOS_ID, EOS_ID
from lmtransfer.training import resume
from lmtransfer.training.loop import RunOptions
from lmtransfer.training.resume import Snapshots, fingerprint

from shipped import shipped

CPU = torch.device("cpu")
CONFIG = ModelConfig(vocab_size=24, d_model=16, n_heads=2, n_layers=1, d_ff=16, dropout=0.1)
CORPUS = np.tile(np.array([BOS_ID, 5, 6, 7, 8, 9, 10, 11, 12, EOS_ID], dtype=np.uint16), 120)
TASK = np.tile(np.array([BOS_ID, 13, 14, 15, 16, 17, EOS_ID], dtype=np.uint16), 60)
PARAMS = shipped("pretrain", max_steps=40, batch_size=8, seq_len=16, lr=3e-3, warmup_steps=5, eval_every=10,
                        eval_batches=2, adapt_epochs=2, adapt_lr=1e-3)


class Interrupted(Exception):
    """Stands in for a kill: raised from the logging callback at a chosen step."""


MASKED = {"pad_id": 0, "unk_id": 1, "bos_id": BOS_ID, "eos_id": EOS_ID, "mask_id": 4, "vocab_size": 24}


def _pretrain_both_phases(snapshots: Snapshots | None, stop_at: int | None = None, model_seed: int = 0,
                          objective: Objective = Objective()):
    """The pretrain stage's two phases (corpus, then the task's texts); `stop_at` interrupts at that logged step."""
    torch.manual_seed(model_seed)
    model = objective.build_model(replace(CONFIG, causal=objective.name == "clm"))
    logged: list[tuple[int, dict]] = []

    def log(metrics: dict, step: int) -> None:
        if step == stop_at:
            raise Interrupted
        logged.append((step, {k: v for k, v in metrics.items() if k != "tokens_per_s"}))

    options = RunOptions(CPU, seed=3, log_metrics=log, log_every=3, snapshots=snapshots)
    corpus = pretrain(model, CORPUS, CORPUS[:400], PARAMS, options, objective)
    task = adapt_to_task(model, TASK, TASK[:200], PARAMS, options, objective, first_step=corpus.steps)
    return model, corpus, task, logged


def _results(corpus, task) -> list:
    return [(p.train_log, p.valid_log, p.tokens_seen, p.steps) for p in (corpus, task)]


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def _objective(nsp: bool | None) -> Objective:
    """None: next-token prediction; else masked tokens, with or without next-sentence prediction."""
    update = {"objective": "mlm", "nsp": nsp}
    return Objective() if nsp is None else Objective.from_params(PARAMS.model_copy(update=update), MASKED)


@functools.cache
def _uninterrupted(nsp: bool | None = None):
    """The reference run of an objective, made once (in a test: one thread) and only read."""
    return _pretrain_both_phases(None, objective=_objective(nsp))


@pytest.mark.parametrize("nsp, stops", [(None, [15]), (None, [27]), (None, [30]), (None, [43]), (None, [46]),
                                        (False, [15, 43]), (True, [15, 43])])
def test_pretraining_resumed_after_interruptions_ends_bit_for_bit_like_an_uninterrupted_run(tmp_path, nsp, stops):
    """Logged steps of both phases, before and after snapshots; masks come from torch's generator, which is saved."""
    objective = _objective(nsp)
    model, corpus, task, logged = _uninterrupted(nsp)
    snapshots = Snapshots("pretrain", "same", every=4, root=tmp_path)
    for stop_at in stops:
        with pytest.raises(Interrupted):
            _pretrain_both_phases(snapshots, stop_at=stop_at, objective=objective)
    # a different initialisation proves the weights come from the snapshot
    resumed, resumed_corpus, resumed_task, relogged = _pretrain_both_phases(snapshots, None, 9, objective)
    assert _same_weights(resumed, model)
    assert _results(resumed_corpus, resumed_task) == _results(corpus, task)
    # the new run (an MLflow run tagged with the killed one) logs the rows from the snapshot on, as they were
    assert relogged and set(map(repr, relogged)) <= set(map(repr, logged)) and relogged[-1] == logged[-1]
    assert len(resumed_corpus.throughput) == len(corpus.throughput)
    assert ("val_nsp_accuracy" in corpus.valid_log[-1]) == bool(nsp)


@pytest.mark.parametrize("fault, said", [
    ("new params", "corpus.pt belongs to another configuration (params, inputs or code changed); starting over"),
    ("truncated", "corpus.pt is unreadable (truncated or damaged); starting over"),  # a write cut short: disk full
])
def test_a_snapshot_of_another_configuration_or_truncated_is_deleted_and_training_starts_over(
        tmp_path, capsys, fault, said):
    with pytest.raises(Interrupted):
        _pretrain_both_phases(Snapshots("pretrain", "old params", every=4, root=tmp_path), stop_at=15)
    path = tmp_path / "pretrain" / "corpus.pt"
    if fault == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    fingerprint = "new params" if fault == "new params" else "old params"
    model, corpus, task, _ = _pretrain_both_phases(Snapshots("pretrain", fingerprint, every=4, root=tmp_path))
    out = capsys.readouterr().out
    assert said in out and out.count("starting over") == 1
    assert _same_weights(model, _uninterrupted()[0])  # trained from the start
    assert _results(corpus, task) == _results(*_uninterrupted()[1:3])


def test_a_finished_run_s_snapshots_give_its_results_without_training_until_cleared(tmp_path):
    """A kill after training but before the outputs are written: the rerun goes straight to the outputs."""
    _pretrain_both_phases(Snapshots("pretrain", "same", every=0, root=tmp_path))
    assert not (tmp_path / "pretrain").exists()  # train.resume_every: 0 takes none
    model, corpus, task, _ = _uninterrupted()
    snapshots = Snapshots("pretrain", "same", every=4, root=tmp_path)
    _pretrain_both_phases(snapshots)
    assert sorted(p.name for p in (tmp_path / "pretrain").iterdir()) == ["corpus.pt", "task.pt"]
    again_model, again_corpus, again_task, logged = _pretrain_both_phases(snapshots, model_seed=9)
    assert _same_weights(again_model, model) and _results(again_corpus, again_task) == _results(corpus, task)
    assert logged == []  # nothing trained, nothing measured again
    snapshots.clear()
    assert not (tmp_path / "pretrain").exists()


def test_a_snapshot_puts_back_every_generator_torch_numpy_and_python(tmp_path):
    snapshots = Snapshots("finetune_scratch@0", "same", every=1, root=tmp_path)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    snapshots.save("epochs", model, optimizer, scheduler, order=[1, 2])
    expected = torch.rand(3), np.random.rand(3), random.random()
    assert snapshots.load("epochs", model, optimizer, scheduler) == {"order": [1, 2]}
    drawn = torch.rand(3), np.random.rand(3), random.random()
    assert torch.equal(drawn[0], expected[0]) and np.array_equal(drawn[1], expected[1]) and drawn[2] == expected[2]


def test_the_fingerprint_follows_params_the_stage_the_inputs_and_the_code_but_not_resume_every(tmp_path, monkeypatch):
    """Every file of an input folder counts (the tokenized folders hold .npy/.json); so does the code, from any
    working directory (the translation and course stages run in their own): a snapshot of other code starts over."""
    data, folder = tmp_path / "data.bin", tmp_path / "tokenized_corpus"
    data.write_bytes(b"abc")
    folder.mkdir()
    (folder / "train.npy").write_bytes(b"ids")

    def of(stage="pretrain", seed=0, every=10):
        return fingerprint(stage, {"train": {"seed": seed, "resume_every": every}}, [data, folder], CPU)

    base = of()
    assert of(every=3) == base and of(seed=1) != base and of("finetune_scratch@0") != base
    for changed in (data, folder / "train.npy"):
        changed.write_bytes(b"other bytes")
        assert of() != base
        base = of()
    files = resume.code_files()
    assert "src/lmtransfer/training/loop.py" in files and "stages/pretrain.py" in files
    monkeypatch.chdir(tmp_path)
    assert resume.code_files() == files and of() == base
    other_code = {**files, "src/lmtransfer/training/loop.py": tmp_path / "other.py"}
    (tmp_path / "other.py").write_text("# other code\n")
    monkeypatch.setattr(resume, "code_files", lambda: other_code)
    assert of() != base


def _split(n: int, seed: int) -> LabeledSplit:
    rng = np.random.default_rng(seed)
    sequences = [np.concatenate([[BOS_ID], rng.integers(7, 24, size=rng.integers(2, 9)), [5 + i % 2], [EOS_ID]])
                 for i in range(n)]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences])]).astype(np.int64)
    return LabeledSplit(np.concatenate(sequences).astype(np.uint16), offsets, np.arange(n, dtype=np.int64) % 2)


def _finetune(snapshots: Snapshots | None, stop_after: int | None = None, model_seed: int = 0):
    torch.manual_seed(model_seed)
    model = Classifier(CONFIG, 2, "mean")
    rows = []

    def log(metrics: dict, epoch: int) -> None:
        rows.append({"epoch": epoch, **metrics})
        if epoch == stop_after:
            raise Interrupted

    params = shipped("finetune", epochs=4, batch_size=16, lr=3e-3, max_len=16, warmup_steps=3)
    result = finetune(model, _split(120, 0), _split(40, 1), params,
                      RunOptions(CPU, seed=5, log_metrics=log, snapshots=snapshots))
    return model, result, rows


def test_finetuning_resumed_after_an_interrupted_epoch_ends_bit_for_bit_like_an_uninterrupted_run(tmp_path):
    model, result, rows = _finetune(None)
    snapshots = Snapshots("finetune_scratch@0", "same", every=1, root=tmp_path)
    with pytest.raises(Interrupted):
        _finetune(snapshots, stop_after=3)  # epochs 1-2 are saved; epoch 3 is lost with the process
    resumed_model, resumed, resumed_rows = _finetune(snapshots, model_seed=4)
    assert _same_weights(resumed_model, model)
    assert resumed.history == result.history and resumed_rows == rows[2:]  # the new run: epochs 3 and 4
    assert resumed.best_epoch == result.best_epoch
    assert all(torch.equal(resumed.best_state[k], v) for k, v in result.best_state.items())


def test_the_adaptation_runs_a_share_of_a_pass_or_stops_at_its_step_cap_and_says_so(capsys):
    """`pretrain.adapt_epochs: 0.5` stops halfway, an integer runs whole passes; `adapt_max_steps` bounds the phase."""
    assert adaptation_steps(5, 118) == 590 and adaptation_steps(0.625, 118) == 74 and adaptation_steps(0.001, 9) == 1
    assert isinstance(shipped("pretrain", adapt_epochs=5).adapt_epochs, int)  # as params.yaml writes it, not 5.0

    def adapt(**change):
        torch.manual_seed(0)
        params = PARAMS.model_copy(update={"adapt_epochs": 1, **change})
        return adapt_to_task(LanguageModel(CONFIG), TASK, TASK[:200], params, RunOptions(CPU, seed=3))

    one_pass, half = adapt(), adapt(adapt_epochs=0.5)
    assert half.steps == round(one_pass.steps / 2) and half.tokens_seen < one_pass.tokens_seen
    assert "capped" not in capsys.readouterr().out
    assert adapt(adapt_max_steps=3).steps == 3 < one_pass.steps
    assert f"would be {one_pass.steps:,} steps; capped at 3 (pretrain.adapt_max_steps)" in capsys.readouterr().out
