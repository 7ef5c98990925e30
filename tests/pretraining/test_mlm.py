"""Masked language modelling (pretrain.objective: mlm) and next-sentence prediction, from masking to pretraining."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from lmtransfer.classification.config import parse_classification_params
from lmtransfer.core.config import ConfigError
from lmtransfer.core.errors import CheckpointError
from lmtransfer.modeling.checkpoint import classifier_from_pretrained, save_checkpoint
from lmtransfer.modeling.model import IGNORE_INDEX, MaskedLanguageModel, ModelConfig, TransformerBase
from lmtransfer.pretraining.checkpoint_import import check_compatible, read_checkpoint_weights
from lmtransfer.pretraining.objectives import MaskedWindows, Objective, SentencePairs, TokenMasker, _positions
from lmtransfer.pretraining.training import pretrain
from lmtransfer.training.loop import RunOptions

from shipped import shipped, shipped_raw

PAD, UNK, BOS, EOS, MASK, V = 0, 1, 2, 3, 4, 50
META = {"pad_id": PAD, "unk_id": UNK, "bos_id": BOS, "eos_id": EOS, "mask_id": MASK, "vocab_size": V}
MASKER = TokenMasker(MASK, V, (PAD, UNK, BOS, EOS), 0.15)


BIDIRECTIONAL = ModelConfig(V, d_model=16, n_layers=2, n_heads=2, d_ff=16, dropout=0.1, causal=False)


def corpus(n_docs: int = 300, seed: int = 0) -> np.ndarray:
    """BOS ... EOS documents, as the tokenize stage stores them; each repeats one token (plain from its neighbours)."""
    rng = np.random.default_rng(seed)
    stream = []
    for _ in range(n_docs):
        stream += [BOS, *[int(rng.integers(5, V))] * int(rng.integers(3, 12)), EOS]
    return np.array(stream, dtype=np.uint16)


# --- masking -------------------------------------------------------------------------------
def test_masking_chooses_the_share_of_ordinary_tokens_and_splits_them_80_10_10():
    torch.manual_seed(0)
    ids = torch.randint(5, V, (400, 100))
    ids[:, 0], ids[:, -1], ids[:200, 60:] = BOS, EOS, PAD  # specials and padding in every row
    inputs, targets = MASKER(ids)
    chosen = targets.ne(IGNORE_INDEX)
    ordinary = (ids >= 5).sum(dim=1)
    assert torch.equal(chosen.sum(dim=1), (ordinary * 0.15).round().long())  # per sequence, exactly
    assert torch.equal(targets[chosen], ids[chosen])  # the original id is the target
    assert not chosen[ids < 5].any()  # padding, BOS, EOS never chosen
    assert torch.equal(inputs[~chosen], ids[~chosen])  # nothing else is touched
    shown = inputs[chosen]
    as_mask, kept = shown.eq(MASK).float().mean().item(), shown.eq(ids[chosen]).float().mean().item()
    random = 1 - as_mask - kept
    assert abs(as_mask - 0.8) < 0.02 and abs(kept - 0.1 - 0.1 * random / 45) < 0.02 and abs(random - 0.1) < 0.02
    assert shown.ge(5).logical_or(shown.eq(MASK)).all()  # a random replacement is never a special id


def test_masking_chooses_at_least_one_token_and_is_repeatable_with_a_generator():
    _, targets = MASKER(torch.tensor([[BOS, 7, EOS, PAD, PAD]]))
    assert targets.ne(IGNORE_INDEX).sum() == 1 and targets[0, 1] == 7
    many = torch.randint(5, V, (8, 30))
    first, again = (MASKER(many, torch.Generator().manual_seed(3)) for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_the_loss_is_scored_on_the_chosen_positions_only():
    torch.manual_seed(0)
    model = MaskedLanguageModel(BIDIRECTIONAL).eval()
    ids = torch.randint(5, V, (4, 12))
    inputs, targets = MASKER(ids)
    logits = model(inputs)
    chosen = targets.ne(IGNORE_INDEX)
    expected = torch.nn.functional.cross_entropy(logits[chosen], targets[chosen])
    assert torch.allclose(model.losses(inputs, targets)["loss"], expected, atol=1e-6)


# --- attention ------------------------------------------------------------------
def test_bidirectional_attention_lets_an_earlier_position_see_a_later_token():
    """The exact opposite of the causal test: changing a future token changes an earlier position's output."""
    torch.manual_seed(0)
    base = TransformerBase(BIDIRECTIONAL).eval()
    ids = torch.randint(5, V, (1, 10))
    changed = ids.clone()
    changed[0, 8] = (ids[0, 8] + 1 - 5) % (V - 5) + 5
    assert not torch.allclose(base(ids)[0, :8], base(changed)[0, :8], atol=1e-5)  # causal: test_model's own test


# --- params that must agree -------------------------------------------------------------------
@pytest.mark.parametrize("raw, message", [
    ({"model": {"attention": "bidirectional"}},
     "model.attention: bidirectional lets every position see the token it must predict under pretrain.objective: "
     "clm (next-token prediction); use causal or auto, or pretrain.objective: mlm"),
    ({"model": {"attention": "causal"}, "pretrain": {"objective": "mlm"}},
     "model.attention: causal hides the right context that pretrain.objective: mlm predicts masked tokens from; "
     "use bidirectional or auto, or pretrain.objective: clm"),
    ({"pretrain": {"nsp": True}},
     "pretrain.nsp: true needs pretrain.objective: mlm (next-sentence prediction is BERT's second task)"),
    ({"pretrain": {"objective": "mlm"}, "finetune": {"pooling": "last"}},
     "finetune.pooling: last suits a causal model, where only the last token has seen the whole text; with "
     "bidirectional attention (pretrain.objective: mlm) use first (BERT's [CLS]) or mean"),
    ({"finetune": {"pooling": "first"}},
     "finetune.pooling: first reads position 0, which a causal model (pretrain.objective: clm) lets see only "
     "itself; use last or mean"),
])
def test_inconsistent_objective_attention_and_pooling_are_refused_naming_the_keys(raw, message):
    with pytest.raises(ConfigError) as error:
        parse_classification_params(shipped_raw(raw))
    assert str(error.value) == f"params: invalid parameters:\n  {message}"


def test_auto_attention_follows_the_objective():
    mlm = {"pretrain": {"objective": "mlm"}, "finetune": {"pooling": "mean"}}
    raws = [{}, mlm, {**mlm, "model": {"attention": "bidirectional"}}]
    assert [parse_classification_params(shipped_raw(raw)).causal_attention for raw in raws] == [True, False, False]


@pytest.mark.parametrize("mask_id", [None, UNK])  # UNK: a sentencepiece model without <mask>
def test_mlm_needs_a_mask_token(mask_id):
    with pytest.raises(ConfigError, match=r"pretrain.objective: mlm needs a <mask> token"):
        Objective.from_params(shipped("pretrain", objective="mlm"), {**META, "mask_id": mask_id})


# --- next-sentence prediction -------------------------------------------------------------------
def test_sentence_pairs_are_half_true_successors_with_segments_and_fit_the_length():
    """Document i is the token 5 + i, three times: A's last token and B's first tell which documents they hold."""
    n_docs = 400
    stream = np.array([t for i in range(n_docs) for t in (BOS, 5 + i, 5 + i, 5 + i, EOS)], dtype=np.uint16)
    masker = TokenMasker(MASK, 5 + n_docs, (PAD, UNK, BOS, EOS), 0.15)
    pairs = SentencePairs(stream, 20, 64, masker, BOS, EOS, PAD, seed=0)
    labels = []
    for inputs, targets, segments, is_next in pairs.sequential(4):
        assert inputs.size(1) <= 20
        original = torch.where(targets.ne(IGNORE_INDEX), targets, inputs)
        for row in range(len(is_next)):
            ids = original[row][original[row].ne(PAD)].tolist()
            sep = ids.index(EOS)
            assert ids[0] == BOS and ids[-1] == EOS and sep > 1 and len(ids) > sep + 2
            assert segments[row][: len(ids)].tolist() == [0] * (sep + 1) + [1] * (len(ids) - sep - 1)
            a_last_doc, b_first_doc = ids[sep - 1] - 5, ids[sep + 1] - 5
            assert (b_first_doc == a_last_doc + 1) == bool(is_next[row])  # true successor exactly when labelled so
            labels.append(int(is_next[row]))
    assert 0.4 < np.mean(labels) < 0.6


def test_sentence_pairs_replay_an_epoch_from_its_generator_state():
    pairs = SentencePairs(corpus(), 24, 8, MASKER, BOS, EOS, PAD, seed=1)
    state = pairs.generator.get_state()
    torch.manual_seed(0)
    full = list(pairs.epoch())
    pairs.generator.set_state(state)
    torch.manual_seed(0)
    assert all(torch.equal(x, y) for a, b in zip(full, pairs.epoch(skip=0), strict=True) for x, y in zip(a, b))
    pairs.generator.set_state(state)
    later = list(pairs.epoch(skip=3))
    assert len(later) == len(full) - 3
    assert all(torch.equal(x[2], y[2]) and torch.equal(x[3], y[3]) for x, y in zip(full[3:], later))


def test_segment_a_folded_into_the_token_embedding_gives_the_same_hidden_states():
    torch.manual_seed(0)
    model = MaskedLanguageModel(BIDIRECTIONAL, next_sentence=True).eval()
    torch.nn.init.normal_(model.segment_embedding.weight)
    ids = torch.tensor([[BOS, 7, 8, 9, PAD], [BOS, 10, 11, PAD, PAD]])
    payload = {"kind": "language_model", "model_config": model.base.config.to_dict(), "objective": "mlm",
               "next_sentence": True, "state_dict": model.state_dict()}
    classifier = classifier_from_pretrained(payload, 2, "mean", V, PAD).eval()
    assert torch.allclose(classifier.base(ids, ids.eq(PAD)), model.hidden(ids), atol=1e-5)


# --- checkpoints ----------------------------------------------------------------------------------
def test_a_masked_lm_checkpoint_is_refused_as_a_causal_model_and_the_reverse(tmp_path):
    torch.manual_seed(0)
    mlm = MaskedLanguageModel(BIDIRECTIONAL)
    path = tmp_path / "mlm.pt"
    save_checkpoint(path, mlm, "language_model", mlm.base.config, objective="mlm", next_sentence=False)
    with pytest.raises(CheckpointError, match="the checkpoint's attention is bidirectional .pretrained with objective "
                                              "mlm. but pretrain.objective / model.attention give causal: set "
                                              "pretrain.objective: mlm"):
        check_compatible(read_checkpoint_weights(path), replace(BIDIRECTIONAL, causal=True), str(path))
    check_compatible(read_checkpoint_weights(path), BIDIRECTIONAL, str(path))  # the matching model loads
    payload = torch.load(path, weights_only=True)
    with pytest.raises(CheckpointError, match="finetune.pooling: last suits a causal model"):
        classifier_from_pretrained(payload, 2, "last", V, PAD)
    assert not classifier_from_pretrained(payload, 2, "first", V, PAD).base.config.causal


# --- the pretraining loop ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("nsp", [False, True])
def test_mlm_pretraining_learns_and_logs_its_scores(nsp):
    torch.manual_seed(0)
    stream = corpus(600)
    params = shipped("pretrain", objective="mlm", nsp=nsp, max_steps=200, batch_size=16, seq_len=24, eval_every=100,
                     eval_batches=4, warmup_steps=10, lr=3e-3)
    objective = Objective.from_params(params, META)
    result = pretrain(objective.build_model(BIDIRECTIONAL), stream[:5000], stream[5000:], params,
                      RunOptions(log_every=20), objective)
    first, last = result.valid_log[0], result.valid_log[-1]
    assert last["val_loss"] < first["val_loss"] - 0.5 and last["val_masked_accuracy"] > first["val_masked_accuracy"]
    assert {"val_masked_accuracy", "val_perplexity"} <= set(last)
    assert ("val_nsp_accuracy" in last) == nsp and ("train_nsp_loss" in result.train_log[-1]) == nsp


def test_mlm_windows_start_with_the_cls_token_and_validation_masks_are_fixed():
    windows = MaskedWindows(corpus(), 16, 8, MASKER, BOS)
    first, again = list(windows.sequential(2)), list(windows.sequential(2))
    assert all(torch.equal(x, y) for a, b in zip(first, again) for x, y in zip(a, b))
    inputs, targets = first[0]
    assert inputs[:, 0].eq(BOS).all() and targets[:, 0].eq(IGNORE_INDEX).all()


def test_document_boundaries_found_a_chunk_at_a_time_are_those_of_the_whole_stream():
    stream = np.random.default_rng(0).integers(0, 6, 1000).astype(np.uint16)
    for chunk in (1, 7, 999, 1000, 5000):
        for value in (BOS, EOS, 5):
            assert np.array_equal(_positions(stream, value, chunk), np.flatnonzero(stream == value))
    assert _positions(stream[:0], BOS).size == 0
