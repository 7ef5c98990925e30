"""Training: packed LM batches, pretraining, fine-tuning, padding, metrics, schedules, checkpoints."""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
import torch

from lmtransfer.classification.config import FinetuneParams
from lmtransfer.classification.finetune import describe_trainable, discriminative_param_groups, finetune
from lmtransfer.classification.inference import predict
from lmtransfer.classification.metrics import accuracy, confusion_matrix, macro_f1, per_class_f1
from lmtransfer.core import io as lmio
from lmtransfer.modeling.checkpoint import (
    build_classifier,
    build_language_model,
    classifier_from_pretrained,
    load_checkpoint,
    save_checkpoint,
)
from lmtransfer.modeling.model import Classifier, LanguageModel, ModelConfig
from lmtransfer.pretraining.training import pretrain
from lmtransfer.tokens.batches import PackedBatches, classification_batches, pad_batch
from lmtransfer.tokens.id_files import LabeledSplit
from lmtransfer.tokens.tokenizer import BOS_ID, EOS_ID, PAD_ID
from lmtransfer.training.loop import RunOptions
from lmtransfer.training.optim import make_optimizer, warmup_constant, warmup_cosine

from shipped import shipped

CPU = torch.device("cpu")
DEVICES = [pytest.param(CPU, id="cpu"),  # the CUDA path too (bf16 autocast, pinned copies) where a GPU is
           pytest.param(torch.device("cuda"), id="cuda",
                        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))]
LM_CONFIG = ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=2, d_ff=64, dropout=0.0)
CLS_CONFIG = ModelConfig(vocab_size=24, d_model=32, n_layers=1, n_heads=2, d_ff=64, dropout=0.0)


# --- packed language-model batches --------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_an_epoch_covers_non_overlapping_windows_in_full_batches_but_the_last_and_targets_are_the_next_tokens(seed):
    n_tokens, seq_len = 257, 10
    batches = PackedBatches(np.arange(n_tokens, dtype=np.uint16), seq_len=seq_len, batch_size=3, seed=seed)
    for _ in range(3):  # each epoch draws a new offset
        pairs = list(batches.epoch())
        assert all(x.dtype == torch.int64 and x.shape == y.shape and x.size(1) == seq_len for x, y in pairs)
        assert all(torch.equal(y, x + 1) for x, y in pairs)  # the ids are 0, 1, 2, ...: the next token is +1
        assert all(x.size(0) == 3 for x, _ in pairs[:-1]) and 1 <= pairs[-1][0].size(0) <= 3
        inputs = torch.cat([x for x, _ in pairs])
        starts = inputs[:, 0].sort().values
        assert torch.all(starts.diff() == seq_len)  # windows tile the range: no overlap, no hole
        flat = inputs.flatten()
        assert flat.unique().numel() == flat.numel()
        offset, last_end = int(starts[0]), int(starts[-1]) + seq_len
        assert 0 <= offset < seq_len
        assert n_tokens - 1 - last_end < seq_len  # no room left for another window


def test_epochs_visit_windows_in_a_new_order_sequential_batches_are_fixed_and_too_short_a_stream_is_named():
    batches = PackedBatches(np.arange(1001), seq_len=10, batch_size=4, seed=0)
    first = torch.cat([x[:, 0] for x, _ in batches.epoch()])
    assert not torch.equal(first, torch.cat([x[:, 0] for x, _ in batches.epoch()]))
    fixed, again = list(batches.sequential(3)), list(batches.sequential(3))
    assert len(fixed) == 3 and all(torch.equal(a[0], b[0]) for a, b in zip(fixed, again))
    assert fixed[0][0][:, 0].tolist() == [0, 10, 20, 30]
    # the validation part is usually the short one: the message must not call it the corpus
    with pytest.raises(ValueError, match=r"the corpus's validation part has 16 tokens, fewer than pretrain\.seq_len"):
        PackedBatches(np.arange(16), seq_len=16, batch_size=2, what="the corpus's validation part")
    PackedBatches(np.arange(17), seq_len=16, batch_size=2)  # exactly one window is enough


# --- pretraining --------------------------------------------------------------------------
PATTERN = np.array([BOS_ID, 5, 6, 7, 8, 9, 10, 11, 12, EOS_ID], dtype=np.uint16)


def _pretrain(max_steps: int, model_seed: int = 0, data_seed: int = 0, dropout: float = 0.0, device=CPU,
              log_every: int = 1, logged: list | None = None):
    torch.manual_seed(model_seed)
    model = LanguageModel(ModelConfig(**{**LM_CONFIG.to_dict(), "dropout": dropout}))
    params = shipped("pretrain", max_steps=max_steps, batch_size=8, seq_len=16, lr=3e-3, warmup_steps=5,
                     eval_every=20, eval_batches=2)
    logged = [] if logged is None else logged
    options = RunOptions(device, seed=data_seed, log_every=log_every,
                         log_metrics=lambda metrics, step: logged.append((step, metrics)))
    return model, pretrain(model, np.tile(PATTERN, 200), np.tile(PATTERN, 30), params, options)


@pytest.mark.parametrize("device", DEVICES)
def test_pretraining_loss_drops_on_a_repetitive_corpus_and_logs_through_the_callback(device):
    logged = []
    _, result = _pretrain(max_steps=80, device=device, log_every=4, logged=logged)
    initial = result.valid_log[0]["val_loss"]
    assert initial == pytest.approx(math.log(LM_CONFIG.vocab_size), rel=0.3)  # an untrained model is near uniform
    assert result.final_val_loss < 0.5 * initial
    assert [row["step"] for row in result.valid_log] == [0, 20, 40, 60, 80]
    assert result.steps == 80 and [row["step"] for row in result.train_log] == list(range(4, 81, 4))
    assert [step for step, metrics in logged if "train_loss" in metrics] == list(range(4, 81, 4))
    assert [step for step, metrics in logged if "val_loss" in metrics] == [0, 20, 40, 60, 80]
    batches = PackedBatches(np.tile(PATTERN, 200), 16, 8, seed=0)  # the same epochs' first 80 batches
    epochs = itertools.chain.from_iterable(batches.epoch() for _ in itertools.count())
    assert result.tokens_seen == sum(targets.numel() for _, targets in itertools.islice(epochs, 80))
    assert result.tokens_seen > 0.9 * 80 * 8 * 16  # only each epoch's last batch may be partial
    assert result.valid_log[-1]["val_perplexity"] == pytest.approx(math.exp(result.final_val_loss))


def test_pretraining_is_deterministic_for_a_seed():
    (model_a, first), (model_b, again) = _pretrain(max_steps=12, dropout=0.1), _pretrain(max_steps=12, dropout=0.1)
    _, other = _pretrain(max_steps=12, data_seed=1, dropout=0.1)
    losses = [row["train_loss"] for row in first.train_log]
    assert losses == [row["train_loss"] for row in again.train_log] and first.valid_log == again.valid_log
    assert all(torch.equal(a, b) for a, b in zip(model_a.state_dict().values(), model_b.state_dict().values()))
    assert losses != [row["train_loss"] for row in other.train_log]


# --- fine-tuning --------------------------------------------------------------------------
def _separable_split(n: int, seed: int) -> LabeledSplit:
    """Class 0 texts contain token 5, class 1 texts token 6, among filler tokens 7..23."""
    rng = np.random.default_rng(seed)
    sequences = []
    for index in range(n):
        body = rng.integers(7, CLS_CONFIG.vocab_size, size=rng.integers(2, 10))
        body[rng.integers(0, len(body), size=2)] = 5 + index % 2
        sequences.append(np.concatenate([[BOS_ID], body, [EOS_ID]]).astype(np.uint16))
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences])]).astype(np.int64)
    return LabeledSplit(np.concatenate(sequences), offsets, np.arange(n, dtype=np.int64) % 2)


def _finetune_params(**overrides) -> FinetuneParams:
    values = {"epochs": 4, "batch_size": 16, "lr": 3e-3, "max_len": 16, "warmup_steps": 5}
    return shipped("finetune", **{**values, **overrides})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_finetuning_learns_a_separable_task(pooling, device):
    train, valid = _separable_split(240, seed=0), _separable_split(60, seed=1)
    torch.manual_seed(0)
    model = Classifier(CLS_CONFIG, 2, pooling)
    logged = []
    result = finetune(model, train, valid, _finetune_params(pooling=pooling),
                      RunOptions(device, log_metrics=lambda metrics, step: logged.append({"epoch": step, **metrics})))
    assert result.best_val_accuracy > 0.9
    assert len(result.history) == 4 and logged == result.history  # MLflow's step metrics: the tsv's rows
    assert all(set(row) == {"epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy"}  # no timings
               for row in result.history)
    assert [row["epoch"] for row in result.history] == [1, 2, 3, 4]
    accuracies = [row["val_accuracy"] for row in result.history]
    assert result.best_val_accuracy == max(accuracies)
    assert result.best_epoch == 1 + accuracies.index(max(accuracies))
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    # the best state is a copy that reproduces the best epoch's validation accuracy
    assert set(result.best_state) == set(model.state_dict())
    restored = Classifier(CLS_CONFIG, 2, pooling)
    restored.load_state_dict(result.best_state)
    probabilities, _ = predict(restored, valid, 32, 16, device)
    assert float((probabilities.argmax(-1) == valid.labels).mean()) == pytest.approx(result.best_val_accuracy)
    # ... and does not alias the live weights (later epochs or edits must not change it)
    snapshot = {k: v.clone() for k, v in result.best_state.items()}
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(1.0)
    assert all(torch.equal(snapshot[k], v) for k, v in result.best_state.items())


def test_a_frozen_backbone_stays_unchanged_while_the_head_learns_and_the_log_line_counts_what_trains():
    train, valid = _separable_split(64, seed=0), _separable_split(16, seed=1)
    torch.manual_seed(0)
    model = Classifier(ModelConfig(**{**CLS_CONFIG.to_dict(), "dropout": 0.1}), 2)
    total, head = (sum(p.numel() for p in part.parameters()) for part in (model, model.head))
    assert describe_trainable(model, False, "finetune_scratch@0") == (
        f"finetune_scratch@0: {total:,} trainable of {total:,} parameters")
    base_before = {k: v.clone() for k, v in model.base.state_dict().items()}
    head_before = {k: v.clone() for k, v in model.head.state_dict().items()}
    finetune(model, train, valid, _finetune_params(epochs=1, freeze_backbone=True), RunOptions(CPU))
    assert all(torch.equal(base_before[k], v) for k, v in model.base.state_dict().items())
    assert not all(torch.equal(head_before[k], v) for k, v in model.head.state_dict().items())
    line = describe_trainable(model, True, "finetune_scratch@0")  # finetune left the base frozen
    assert line.startswith(f"finetune_scratch@0: {head:,} trainable of {total:,} parameters (")
    assert "frozen in both variants" in line and "scratch model trains a head on random features" in line


def test_predict_returns_probabilities_in_split_order():
    split = _separable_split(10, seed=3)
    torch.manual_seed(0)
    model = Classifier(CLS_CONFIG, 2)
    probabilities, loss = predict(model, split, batch_size=3, max_len=16, device=CPU)
    assert probabilities.shape == (10, 2)
    assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    with torch.no_grad():
        one = torch.softmax(model(torch.from_numpy(split.sequence(7).astype(np.int64))[None]), -1)
    assert np.allclose(probabilities[7], one[0].numpy(), atol=1e-5)
    assert loss == pytest.approx(-np.log(probabilities[np.arange(10), split.labels]).mean(), rel=1e-4)


@pytest.mark.parametrize("bucketed", [True, False])
def test_shuffled_classification_batches_cover_each_example_once(bucketed):
    split = _separable_split(50, seed=2)
    seen = []
    for ids, labels in classification_batches(split, 8, 16, PAD_ID, np.random.default_rng(0), bucketed=bucketed):
        assert ids.size(0) == labels.size(0) <= 8
        seen += [(tuple(row[row != PAD_ID].tolist()), int(label)) for row, label in zip(ids, labels)]
    expected = [(tuple(split.sequence(i).tolist()), int(split.labels[i])) for i in range(len(split))]
    assert sorted(seen) == sorted(expected)


def test_random_batches_are_the_permutation_cut_in_order_and_bucketed_ones_group_lengths():
    lengths = np.arange(3, 3 + 64) % 29 + 3  # lengths 3..31, scattered over the split
    ids = np.concatenate([np.full(n, 7, dtype=np.uint16) for n in lengths])
    split = LabeledSplit(ids, np.concatenate([[0], np.cumsum(lengths)]), np.arange(64) % 2)
    widths = {bucketed: [batch.size(1) for batch, _ in classification_batches(
        split, 8, 64, PAD_ID, np.random.default_rng(5), bucketed=bucketed)] for bucketed in (True, False)}
    order = np.random.default_rng(5).permutation(64)
    assert widths[False] == [int(lengths[order[i : i + 8]].max()) for i in range(0, 64, 8)]
    padding = {bucketed: sum(w * 8 for w in widths[bucketed]) - lengths.sum() for bucketed in widths}
    assert padding[True] < padding[False] / 3  # similar lengths together: little padding


# --- padding ------------------------------------------------------------------------------
def test_pad_batch_right_pads_with_the_padding_id_and_keeps_the_first_max_len_tokens():
    batch = pad_batch([np.array([2, 5, 3]), np.array([2, 5, 6, 7, 3]), np.array([2, 3])], max_len=10, pad_id=PAD_ID)
    assert batch.dtype == torch.long and PAD_ID == 0
    assert batch.tolist() == [[2, 5, 3, 0, 0], [2, 5, 6, 7, 3], [2, 3, 0, 0, 0]]
    cut = pad_batch([np.array([2, 5, 6, 7, 8, 9], dtype=np.uint16), np.array([2, 5, 6], dtype=np.uint16)], 4, PAD_ID)
    assert cut.tolist() == [[2, 5, 6, 7], [2, 5, 6, 0]]


# --- metrics ------------------------------------------------------------------------------
@pytest.mark.parametrize("actual, predicted, matrix, acc, f1s, macro", [
    ([0, 0, 1, 1, 2, 2, 2], [0, 1, 1, 1, 2, 0, 2], [[1, 1, 0], [0, 2, 0], [1, 0, 2]], 5 / 7, [0.5, 0.8, 0.8], 0.7),
    ([0, 0, 1], [0, 0, 0], [[2, 0, 0], [1, 0, 0], [0, 0, 0]], 2 / 3, [0.8, 0.0, 0.0], 0.4),  # class 2 never occurs
    ([1, 0, 1, 1, 0], [1, 0, 1, 1, 0], [[2, 0], [0, 3]], 1.0, [1.0, 1.0], 1.0),  # perfect predictions score one
])
def test_confusion_matrix_accuracy_and_f1_match_hand_computed_values(actual, predicted, matrix, acc, f1s, macro):
    """Rows actual, columns predicted. First row: class 0 p=1/2 r=1/2 -> 0.5, 1 p=2/3 r=1 -> 0.8, 2 p=1 r=2/3."""
    counted = confusion_matrix(np.array(actual), np.array(predicted), len(matrix))
    assert counted.tolist() == matrix and accuracy(counted) == pytest.approx(acc)
    assert per_class_f1(counted) == pytest.approx(f1s) and macro_f1(counted) == pytest.approx(macro)
    assert accuracy(np.zeros((2, 2), dtype=np.int64)) == 0.0


# --- learning-rate schedule ----------------------------------------------------------------
def _rates(scheduler, optimizer, steps: int) -> list:
    rates = []
    for _ in range(steps):
        rates.append(scheduler.get_last_lr())
        optimizer.step()
        scheduler.step()
    return rates


COSINE = [0.1 + 0.45 * (1 + math.cos(math.pi * min(1, k / 8))) for k in range(10)]  # 8 steps to the floor 0.1


@pytest.mark.parametrize("schedule, expected", [
    (lambda opt: warmup_constant(opt, warmup_steps=0), [1.0] * 50),  # the course's: no decay, 3e-4 to the last step
    (lambda opt: warmup_constant(opt, warmup_steps=4), [0.25, 0.5, 0.75] + [1.0] * 5),
    (lambda opt: warmup_cosine(opt, warmup_steps=4, total_steps=12, floor=0.1), [0.25, 0.5, 0.75, 1.0] + COSINE),
], ids=["constant", "constant-warm-up", "cosine"])
def test_schedules_warm_up_then_keep_the_base_rate_or_decay_to_the_floor_in_every_group(schedule, expected):
    parameters = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
    optimizer = torch.optim.SGD([{"params": [parameters[0]], "lr": 1.0}, {"params": [parameters[1]], "lr": 3e-4}])
    rates = _rates(schedule(optimizer), optimizer, len(expected))
    assert [rate[0] for rate in rates] == pytest.approx(expected)
    assert [rate[1] for rate in rates] == pytest.approx([3e-4 * factor for factor in expected])


def test_fine_tuning_with_the_constant_schedule_never_changes_the_rate(monkeypatch):
    seen: list[float] = []
    step = torch.optim.AdamW.step
    monkeypatch.setattr(torch.optim.AdamW, "step",
                        lambda opt, *args, **kw: seen.append(opt.param_groups[0]["lr"]) or step(opt, *args, **kw))
    ids = np.arange(4, 4 + 16 * 6) % 20 + 4
    split = LabeledSplit(ids.astype(np.int64), np.arange(0, 16 * 6 + 1, 6), np.arange(16) % 2)
    params = shipped("finetune", epochs=2, batch_size=4, lr=3e-4, schedule="constant", warmup_steps=0,
                     head_lr_multiplier=1.0, weight_decay=0.0, max_len=8)
    finetune(Classifier(CLS_CONFIG, n_classes=2, pooling="last"), split, split, params, RunOptions(seed=0))
    assert len(seen) == 8 and set(seen) == {3e-4}


def test_discriminative_learning_rates_go_down_from_the_head_to_the_embedding_and_each_group_is_scheduled():
    model = Classifier(CLS_CONFIG, 2)
    groups = discriminative_param_groups(model, lr=1e-3, head_lr_multiplier=10, layer_lr_decay=0.5)
    n_layers = CLS_CONFIG.n_layers
    assert [g["lr"] for g in groups] == pytest.approx([1e-2] + [1e-3 * 0.5**d for d in range(n_layers)]
                                                      + [1e-3 * 0.5**n_layers])
    assert groups[0]["params"] == list(model.head.parameters())
    assert groups[-1]["params"] == [model.base.token_embedding.weight]
    every = [id(p) for g in groups for p in g["params"]]
    assert sorted(every) == sorted(id(p) for p in model.parameters())  # each parameter exactly once
    optimizer = make_optimizer(discriminative_param_groups(model, 1e-3, 4.0, 0.5), 1e-3, 0.0)
    rates = _rates(warmup_cosine(optimizer, warmup_steps=4, total_steps=20), optimizer, 5)
    assert rates[0][:2] == pytest.approx([4e-3 / 4, 1e-3 / 4]) and rates[4][:2] == pytest.approx([4e-3, 1e-3])


# --- checkpoints --------------------------------------------------------------------------
def test_classifier_checkpoint_round_trip_gives_identical_outputs(tmp_path):
    torch.manual_seed(0)
    model = Classifier(CLS_CONFIG, 3, pooling="mean").eval()
    path = tmp_path / "models" / "classifier.pt"
    save_checkpoint(path, model, "classifier", CLS_CONFIG, n_classes=3, pooling="mean", label_names=["a", "b", "c"])
    assert sorted(p.name for p in path.parent.iterdir()) == ["classifier.pt"]
    payload = load_checkpoint(path, expected_kind="classifier")
    assert payload["label_names"] == ["a", "b", "c"]
    restored = build_classifier(payload).eval()
    assert restored.pooling == "mean"
    ids = torch.tensor([[2, 8, 9, 3, 0], [2, 10, 11, 12, 3]])
    with torch.no_grad():
        assert torch.equal(model(ids), restored(ids))


def test_a_language_model_checkpoint_is_stable_bytes_gives_a_classifier_its_base_and_bad_files_are_named(tmp_path):
    path, garbage, foreign = tmp_path / "lm.pt", tmp_path / "garbage.pt", tmp_path / "foreign.pt"
    torch.manual_seed(0)
    lm = LanguageModel(LM_CONFIG)
    save_checkpoint(path, lm, "language_model", LM_CONFIG)
    save_checkpoint(tmp_path / "sub" / "again.pt", lm, "language_model", LM_CONFIG)
    assert path.read_bytes() == (tmp_path / "sub" / "again.pt").read_bytes()  # dvc.lock records checkpoint hashes
    torch.manual_seed(1)  # a different initialization than the language model's
    classifier = classifier_from_pretrained(load_checkpoint(path), n_classes=2, pooling="last", vocab_size=20)
    lm_base = lm.base.state_dict()
    assert classifier.base.state_dict().keys() == lm_base.keys()
    assert all(torch.equal(lm_base[k], v) for k, v in classifier.base.state_dict().items())
    assert classifier.head.out_features == 2 and classifier.pooling == "last"
    with pytest.raises(ValueError, match="vocabulary of 20.*tokenizer.vocab_size"):
        classifier_from_pretrained(load_checkpoint(path), n_classes=2, pooling="last", vocab_size=21)
    with pytest.raises(ValueError, match="language_model"):
        load_checkpoint(path, expected_kind="classifier")
    assert isinstance(build_language_model(load_checkpoint(path, expected_kind="language_model")), LanguageModel)
    garbage.write_bytes(b"\x00not a torch file at all")
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(ValueError, match=str(garbage)):
        load_checkpoint(garbage)
    with pytest.raises(ValueError, match="not an lmtransfer checkpoint"):
        load_checkpoint(foreign)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_checkpoint(tmp_path / "missing.pt")


# --- atomic writes ------------------------------------------------------------------------
@pytest.mark.parametrize("folder", [False, True], ids=["atomic_path", "atomic_directory"])
def test_an_atomic_write_keeps_the_old_one_when_the_block_fails_else_replaces_it_with_a_normal_mode(tmp_path, folder):
    path, atomic, mode = ((tmp_path / "prepared", lmio.atomic_directory, 0o777) if folder
                          else (tmp_path / "state.txt", lmio.atomic_path, 0o666))
    file = (lambda root: root / "meta.json") if folder else (lambda root: root)
    if folder:
        path.mkdir()
    file(path).write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic(path) as tmp:
            assert tmp != path and tmp.parent == path.parent
            file(tmp).write_text("half-written", encoding="utf-8")
            raise RuntimeError("killed")
    assert file(path).read_text(encoding="utf-8") == "old" and os.listdir(tmp_path) == [path.name]
    with atomic(path) as tmp:
        file(tmp).write_text("new", encoding="utf-8")
        assert file(path).read_text(encoding="utf-8") == "old"  # nothing visible until the block ends
    assert file(path).read_text(encoding="utf-8") == "new" and os.listdir(tmp_path) == [path.name]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == mode & ~umask


def test_json_and_tsv_round_trip_leaving_only_the_file(tmp_path):
    json_file = tmp_path / "out" / "metrics.json"
    lmio.write_json(json_file, {"accuracy": 0.5, "labels": ["a", "b"]})
    lmio.write_json(json_file, {"accuracy": 0.75})
    assert os.listdir(json_file.parent) == ["metrics.json"] and lmio.read_json(json_file) == {"accuracy": 0.75}
    path = tmp_path / "log.tsv"
    lmio.write_tsv(path, [{"step": 1, "loss": 0.123456789}, {"step": 2, "loss": 2.0}])
    assert lmio.read_tsv(path) == [{"step": "1", "loss": "0.123457"}, {"step": "2", "loss": "2"}]
    with pytest.raises(ValueError, match="no rows"):
        lmio.write_tsv(tmp_path / "empty.tsv", [])
