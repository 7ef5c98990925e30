"""The original course setup, end to end, the way a new user brings it: only params.yaml edits.

The files are generated here in the course's formats: reviews already cut into
sentencepiece pieces with parallel `.label` files, the sentencepiece model that
cut them (sentencepiece's default ids: no padding), a fairseq dictionary that
misses a few rare pieces, and a language-model checkpoint in the original
layout (`model_state_dict`, `base.encoder.weight`, sequence-first layer names).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch
from pipeline_repo import make_repo, run

from lmtransfer.model import LanguageModel, ModelConfig, sinusoidal_positions

pytestmark = pytest.mark.slow

GOOD = ["magnifique", "passionnant", "superbe", "émouvant", "drôle", "captivant"]
BAD = ["ennuyeux", "médiocre", "lent", "décevant", "plat", "pénible"]
FILLER = ["ce", "livre", "est", "un", "roman", "très", "vraiment", "histoire", "auteur", "la", "fin", "et"]
D_MODEL, N_LAYERS, D_FF = 16, 1, 16
RARE_PIECES_LEFT_OUT = 3

COURSE_PARAMS = {
    "data": {"source": "files", "train": "raw/course/train.review.spm", "test": "raw/course/test.review.spm",
             "format": "pieces", "valid_fraction": 0.2},
    "tokenizer": {"model_file": "raw/course/sentencepiece.bpe.model", "vocab_file": "raw/course/dict.txt"},
    "model": {"n_layers": N_LAYERS, "d_model": D_MODEL, "n_heads": 2, "d_ff": D_FF},
    "pretrain": {"init_from": "raw/course/pretrained.pt", "batch_size": 4, "seq_len": 16, "eval_batches": 2,
                 "generate_tokens": 4, "prompts": ["Ce livre est"], "adapt_epochs": 0},
    "finetune": {"epochs": 2, "batch_size": 8, "max_len": 32, "warmup_steps": 2, "seeds": [0]},
    "train": {"log_every": 4},
}


def _review(rng: random.Random, words: list[str]) -> str:
    tokens = rng.sample(FILLER, 5) + rng.sample(words, 2)
    rng.shuffle(tokens)
    return " ".join(tokens).capitalize() + "."


def original_checkpoint(vocab_size: int, seed: int = 0) -> dict:
    """What the course saved: our LanguageModel's tensors under the original, sequence-first names."""
    torch.manual_seed(seed)
    model = LanguageModel(ModelConfig(vocab_size, D_MODEL, N_LAYERS, 2, D_FF, pad_id=1))
    renamed = {
        "base.token_embedding.": "base.encoder.",
        "base.layers.layers.": "base.transformer_encoder.layers.",
        "head.": "classifier.decoder.",
    }
    state = {}
    for key, value in model.state_dict().items():
        for ours, theirs in renamed.items():
            if key.startswith(ours):
                state[theirs + key[len(ours):]] = value.clone()
    state["base.pos_encoder.pe"] = sinusoidal_positions(128, D_MODEL).unsqueeze(1)  # (max_len, 1, D)
    return {"model_state_dict": state, "epoch": 7, "optimizer_state_dict": {}}


def write_course_files(root: Path) -> None:
    course = root / "raw" / "course"
    course.mkdir(parents=True)
    rng = random.Random(0)
    texts = {split: [] for split in ("train", "test")}
    for split, n in (("train", 120), ("test", 40)):
        for index in range(n):
            label = index % 2
            texts[split].append((_review(rng, GOOD if label else BAD) + f" {split}{index}", label))
    raw_text = course / "french.txt"
    raw_text.write_text("\n".join(t for split in texts.values() for t, _ in split) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(raw_text), model_prefix=str(course / "sentencepiece.bpe"),
                                   vocab_size=120, model_type="bpe", minloglevel=2)
    raw_text.unlink()
    segmenter = spm.SentencePieceProcessor(model_file=str(course / "sentencepiece.bpe.model"))
    counts: Counter[str] = Counter()
    for split, rows in texts.items():
        pieces = [" ".join(segmenter.encode(text, out_type=str)) for text, _ in rows]
        counts.update(p for line in pieces for p in line.split())
        (course / f"{split}.review.spm").write_text("\n".join(pieces) + "\n", encoding="utf-8")
        (course / f"{split}.label").write_text("".join(f"{label}\n" for _, label in rows), encoding="utf-8")
    kept = counts.most_common()[:-RARE_PIECES_LEFT_OUT]
    (course / "dict.txt").write_text("".join(f"{piece} {count}\n" for piece, count in kept), encoding="utf-8")
    torch.save(original_checkpoint(len(kept) + 4), course / "pretrained.pt")


@pytest.fixture(scope="module")
def course_repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("course")
    env = make_repo(root, COURSE_PARAMS, write_course_files)
    run(["dvc", "repro"], root, env)
    return root, env


def test_the_dictionary_is_the_id_space(course_repo):
    root, _ = course_repo
    meta = json.loads((root / "data/tokenized/meta.json").read_text())
    dictionary = (root / "raw/course/dict.txt").read_text(encoding="utf-8").splitlines()
    assert meta["scheme"] == "dictionary"
    assert meta["vocab_size"] == len(dictionary) + 4
    assert (meta["bos_id"], meta["pad_id"], meta["eos_id"], meta["unk_id"]) == (0, 1, 2, 3)
    assert 0 < meta["unknown_rate"]["train"] < 0.05  # the rare pieces left out of the dictionary
    first_review = (root / "data/prepared/train.tsv").read_text(encoding="utf-8").splitlines()[1].split("\t")[0]
    ids = {piece.split(" ")[0]: 4 + index for index, piece in enumerate(dictionary)}
    expected = [0] + [ids.get(piece, 3) for piece in first_review.split()]
    with np.load(root / "data/tokenized/train.npz") as train:
        assert train["ids"][: len(expected)].tolist() == expected


def test_pretrain_loads_the_course_checkpoint_instead_of_training(course_repo):
    root, _ = course_repo
    course = torch.load(root / "raw/course/pretrained.pt", weights_only=True)["model_state_dict"]
    ours = torch.load(root / "models/pretrained.pt", weights_only=True)
    assert torch.equal(ours["state_dict"]["base.token_embedding.weight"], course["base.encoder.weight"])
    assert torch.equal(ours["state_dict"]["base.layers.layers.0.linear1.weight"],
                       course["base.transformer_encoder.layers.0.linear1.weight"])
    assert torch.equal(ours["state_dict"]["head.weight"], course["classifier.decoder.weight"])
    assert ours["model_config"]["pad_id"] == 1 and ours["init_from"] == "raw/course/pretrained.pt"
    summary = json.loads((root / "metrics/pretrain.json").read_text())
    assert summary["steps"] == 0 and summary["val_loss"] > 0


def test_both_fine_tunes_and_the_evaluation_ran_on_the_course_splits(course_repo):
    root, _ = course_repo
    prepared = json.loads((root / "data/prepared/meta.json").read_text())
    assert prepared["examples"] == {"train": 96, "valid": 24, "test": 40}  # valid carved from the 120 train
    assert prepared["label_names"] == ["0", "1"] and prepared["labeled_format"] == "pieces"
    evaluation = json.loads((root / "metrics/evaluate.json").read_text())
    for variant in ("pretrained", "scratch"):
        assert set(evaluation[variant]["f1_per_class_mean"]) == {"0", "1"}
        assert evaluation[variant]["accuracy_std"] == 0.0 and len(evaluation[variant]["accuracy_per_seed"]) == 1
    assert evaluation["gap"]["ci95_low"] <= evaluation["gap"]["accuracy_mean"] <= evaluation["gap"]["ci95_high"]
    checkpoint = torch.load(root / "models/finetuned/pretrained/seed0.pt", weights_only=True)
    assert checkpoint["label_names"] == ["0", "1"] and checkpoint["model_config"]["pad_id"] == 1


def test_predict_cuts_raw_text_with_the_course_model_and_maps_it_through_the_dictionary(course_repo):
    root, env = course_repo
    out = run([sys.executable, "-m", "lmtransfer.cli", "predict", "Ce livre est magnifique et captivant."],
              root, env)
    label, probability, text = out.strip().split("\t")
    assert label in {"0", "1"} and 0.5 <= float(probability) <= 1.0


def test_a_checkpoint_that_does_not_fit_the_model_stops_validate_naming_the_param(course_repo):
    root, env = course_repo
    params_file = root / "params.yaml"
    original = params_file.read_text()
    model_before = (root / "models/pretrained.pt").read_bytes()
    try:
        params_file.write_text(original.replace(f"d_ff: {D_FF}", "d_ff: 32"))
        result = subprocess.run(["dvc", "repro"], cwd=root, env=env, capture_output=True, text=True)
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert "validate: error:" in output and "linear1.weight" in output and "set model.d_ff: 16" in output
        assert (root / "models/pretrained.pt").read_bytes() == model_before
    finally:
        params_file.write_text(original)
        run(["dvc", "repro", "validate"], root, env)
