"""`lmtransfer course --from FOLDER --manifest M` end to end, on files generated in the course's formats and names:
pieces with `.label` files (repeats, and train reviews in valid or test, as the real ones), its sentencepiece model,
a fairseq dictionary of V = 50,001 missing a few rare pieces, and a sequence-first `model_state_dict` LM."""

from __future__ import annotations

import hashlib
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
from ruamel.yaml import YAML

from lmtransfer.modeling.model import LanguageModel, ModelConfig, sinusoidal_positions

from pipeline_repo import make_repo, run

pytestmark = pytest.mark.slow

GOOD = ["magnifique", "passionnant", "superbe", "émouvant", "drôle", "captivant"]
BAD = ["ennuyeux", "médiocre", "lent", "décevant", "plat", "pénible"]
FILLER = ["ce", "livre", "est", "un", "roman", "très", "vraiment", "histoire", "auteur", "la", "fin", "et"]
D_MODEL, N_LAYERS, D_FF = 16, 1, 16
DICTIONARY_ENTRIES = 49_997  # the course's dict.txt: V = 50,001 with the 4 special ids
RARE_PIECES_LEFT_OUT = 3
ONE_SEED = ["--set", "finetune.seeds=[0]"]  # one fine-tune per variant in place of the plan's three
SIZES = {"train": 120, "valid": 30, "test": 40}  # rows per file (the course's: 1,600 / 400 / 2,000)
# profiles/course.yaml but for what makes it run in seconds: the checkpoint's tiny network, few epochs, short texts
SMALLER = {
    "model": {"n_layers": N_LAYERS, "d_model": D_MODEL, "n_heads": 2, "d_ff": D_FF},
    "pretrain": {"batch_size": 4, "seq_len": 16, "eval_batches": 2, "generate_tokens": 4},
    "finetune": {"epochs": 2, "max_len": 32},
    "train": {"log_every": 4},
}


def _review(rng: random.Random, words: list[str]) -> str:
    tokens = rng.sample(FILLER, 5) + rng.sample(words, 2)
    rng.shuffle(tokens)
    return " ".join(tokens).capitalize() + "."


def original_checkpoint(vocab_size: int, seed: int = 0) -> dict:
    """What the course saved: our LanguageModel's tensors under the original, sequence-first names."""
    torch.manual_seed(seed)
    model = LanguageModel(ModelConfig(vocab_size, D_MODEL, N_LAYERS, 2, D_FF, 0.1, pad_id=1))
    renamed = {"base.token_embedding.": "base.encoder.", "base.layers.layers.": "base.transformer_encoder.layers.",
               "head.": "classifier.decoder."}
    state = {}
    for key, value in model.state_dict().items():
        for ours, theirs in renamed.items():
            if key.startswith(ours):
                state[theirs + key[len(ours):]] = value.clone()
    state["base.pos_encoder.pe"] = sinusoidal_positions(128, D_MODEL).unsqueeze(1)  # (max_len, 1, D)
    return {"model_state_dict": state, "epoch": 7, "optimizer_state_dict": {}}


def course_texts(rng: random.Random) -> dict[str, list[tuple[str, int]]]:
    """Distinct reviews per file, then repeats inside valid and test, and train reviews also in valid or test."""
    texts = {split: [(_review(rng, GOOD if i % 2 else BAD) + f" {split}{i}", i % 2) for i in range(n - 3)]
             for split, n in SIZES.items()}
    texts["train"] += [texts["train"][0], texts["valid"][1], texts["test"][2]]  # 1 repeat, 1 in valid, 1 in test
    texts["valid"] += [texts["valid"][3], texts["test"][4], texts["valid"][5]]  # 2 repeats, 1 also in test
    texts["test"] += [texts["test"][6], texts["test"][7], texts["test"][6]]  # 3 repeats
    return texts


def write_course_files(folder: Path) -> None:
    """The course's files as a clone lays them out, the dictionary padded to its size with pieces no text holds."""
    texts = course_texts(random.Random(0))
    (folder / "cls-books").mkdir(parents=True)
    raw_text = folder / "french.txt"
    raw_text.write_text("\n".join(t for split in texts.values() for t, _ in split) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(raw_text), model_prefix=str(folder / "sentencepiece.french"),
                                   vocab_size=120, model_type="bpe", minloglevel=2)
    raw_text.unlink()
    (folder / "sentencepiece.french.vocab").unlink()
    segmenter = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.french.model"))
    counts: Counter[str] = Counter()
    for split, rows in texts.items():
        pieces = [" ".join(segmenter.encode(text, out_type=str)) for text, _ in rows]
        counts.update(p for line in pieces for p in line.split())
        (folder / f"cls-books/{split}.review.spm").write_text("\n".join(pieces) + "\n", encoding="utf-8")
        (folder / f"cls-books/{split}.label").write_text("".join(f"{label}\n" for _, label in rows), encoding="utf-8")
    kept = counts.most_common()[:-RARE_PIECES_LEFT_OUT]
    unused = [(f"▁mot{index}", 1) for index in range(DICTIONARY_ENTRIES - len(kept))]
    (folder / "dict.txt").write_text("".join(f"{piece} {count}\n" for piece, count in kept + unused), encoding="utf-8")
    torch.save(original_checkpoint(DICTIONARY_ENTRIES + 4), folder / "pretrained_model_4layers.pt")


def manifest_of(folder: Path, path: Path) -> Path:
    """A manifest naming every file of `folder` with its sha256 and size, as the pinned one names the course's."""
    files = [{"path": p.relative_to(folder).as_posix(), "size": p.stat().st_size,
              "sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "required": not p.name.endswith(".pt")}
             for p in sorted(folder.rglob("*")) if p.is_file()]
    path.write_text(json.dumps({"repository": "tests/course", "commit": "0" * 40, "files": files}), encoding="utf-8")
    return path


def lmtransfer(args: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lmtransfer.cli", *args], cwd=root, env=env, capture_output=True,
                          text=True)


@pytest.fixture(scope="module")
def course_repo(tmp_path_factory) -> tuple[Path, dict[str, str], Path, str]:
    """A copy of the repository, profiles/course.yaml made tiny, after `lmtransfer course --from FOLDER` (ONE_SEED)."""
    root = tmp_path_factory.mktemp("course")
    files = tmp_path_factory.mktemp("course-files")
    write_course_files(files)
    manifest = manifest_of(files, files.parent / "course-manifest.json")

    env = make_repo(root, SMALLER, lambda repo: None, params_file="profiles/course.yaml")
    done = lmtransfer(["course", "--from", str(files), "--manifest", str(manifest), *ONE_SEED], root, env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root, env, files, done.stdout


def test_the_command_checks_the_files_loads_the_courses_model_and_prints_the_labs_table(course_repo):
    course, _, files, output = course_repo
    assert "files of tests/course at 0000000 checked in" in output
    assert "the course's language model (pretrained_model_4layers.pt), loaded" in output
    assert "course: dvc exp run -n course -S data.source=files -S " in output  # the profile, then the plan
    assert "-S pretrain.init_from=data/course/pretrained_model_4layers.pt" in output
    assert "-S 'data.corpus=[]' -S 'finetune.seeds=[0]'" in output  # --set last: it wins
    assert "validation accuracy per epoch (mean ± sd over the runs):" in output
    assert "course: 0.78" not in output and "about 0.78" in output  # the course's published numbers beside
    evaluation = json.loads((course / "metrics/evaluate.json").read_text())
    for variant in ("pretrained", "scratch"):
        assert len(evaluation[variant]["accuracy_per_seed"]) == 1  # one loaded LM, one fine-tuning seed each
    assert (evaluation["n_pretraining_runs"], evaluation["n_finetuning_seeds"]) == (1, 1)
    assert "1 runs per variant (1 pretraining run(s) x 1 fine-tuning seed(s))" in output
    assert (course / "plots/finetune_accuracy.png").stat().st_size > 0
    assert (course / "data/course/dict.txt").read_bytes() == (files / "dict.txt").read_bytes()
    # pretrain loaded the course's checkpoint instead of training
    original = torch.load(course / "data/course/pretrained_model_4layers.pt", weights_only=True)["model_state_dict"]
    ours = torch.load(course / "models/pretrained/seed0.pt", weights_only=True)
    assert torch.equal(ours["state_dict"]["base.token_embedding.weight"], original["base.encoder.weight"])
    assert torch.equal(ours["state_dict"]["base.layers.layers.0.linear1.weight"],
                       original["base.transformer_encoder.layers.0.linear1.weight"])
    assert torch.equal(ours["state_dict"]["head.weight"], original["classifier.decoder.weight"])
    assert ours["model_config"]["pad_id"] == 1 and ours["init_from"] == "data/course/pretrained_model_4layers.pt"
    summary = json.loads((course / "metrics/pretrain/seed0.json").read_text())
    assert summary["steps"] == 0 and summary["val_loss"] > 0


def test_the_dictionary_is_the_id_space_and_predict_maps_raw_text_through_it(course_repo):
    course, env = course_repo[:2]
    meta = json.loads((course / "data/tokenized/meta.json").read_text())
    dictionary = (course / "data/course/dict.txt").read_text(encoding="utf-8").splitlines()
    assert meta["scheme"] == "dictionary"
    assert meta["vocab_size"] == len(dictionary) + 4 == 50_001
    assert (meta["bos_id"], meta["pad_id"], meta["eos_id"], meta["unk_id"]) == (0, 1, 2, 3)
    assert 0 < meta["unknown_rate"]["train"] < 0.05  # the rare pieces left out of the dictionary
    first_review = (course / "data/prepared/train.tsv").read_text(encoding="utf-8").splitlines()[1].split("\t")[0]
    ids = {piece.split(" ")[0]: 4 + index for index, piece in enumerate(dictionary)}
    expected = [0] + [ids.get(piece, 3) for piece in first_review.split()]
    with np.load(course / "data/tokenized/train.npz") as train:
        assert train["ids"][: len(expected)].tolist() == expected
    out = run([sys.executable, "-m", "lmtransfer.cli", "predict", "Ce livre est magnifique et captivant."], course, env)
    label, probability, _ = out.strip().split("\t")  # cut with the course's sentencepiece model, then the dictionary
    assert label in {"0", "1"} and 0.5 <= float(probability) <= 1.0


def test_a_file_with_one_byte_changed_is_refused_by_name_and_the_results_stay(course_repo, tmp_path):
    course, env, files, _ = course_repo
    results = (course / "metrics/evaluate.json").read_bytes()
    copy = tmp_path / "files"
    subprocess.run(["cp", "-r", str(files), str(copy)], check=True)
    label = copy / "cls-books/test.label"
    label.write_bytes(label.read_bytes().replace(b"0", b"1", 1))
    placed = course / "data/course/cls-books/test.label"
    placed.write_bytes(placed.read_bytes() + b"0\n")  # damaged in place too: it must come from the folder again
    done = lmtransfer(["course", "--from", str(copy), "--manifest", str(files.parent / "course-manifest.json"),
                       *ONE_SEED], course, env)
    assert done.returncode != 0
    assert "cls-books/test.label: its sha256 is not the pinned" in done.stderr and "Traceback" not in done.stderr
    assert (course / "metrics/evaluate.json").read_bytes() == results
    placed.write_bytes((files / "cls-books/test.label").read_bytes())


def test_both_fine_tunes_and_the_evaluation_ran_on_the_course_splits(course_repo):
    root = course_repo[0]
    prepared = json.loads((root / "data/prepared/meta.json").read_text())
    # valid and test as given, row for row; train loses its repeat and its 2 reviews also in valid or test
    assert prepared["examples"] == {"train": SIZES["train"] - 3, "valid": SIZES["valid"], "test": SIZES["test"]}
    assert prepared["removed"] == {"duplicates_train": 1, "train_texts_also_in_valid": 1,
                                   "train_texts_also_in_test": 1, "train_texts_also_in_valid_or_test": 2}
    assert prepared["kept_as_given"] == {"valid": {"rows": 30, "repeated_rows": 2, "rows_also_in_test": 1},
                                         "test": {"rows": 40, "repeated_rows": 3}}
    given = (root / "data/course/cls-books/test.review.spm").read_text(encoding="utf-8").splitlines()
    prepared_test = (root / "data/prepared/test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    assert [line.split("\t")[0] for line in prepared_test] == given
    predictions = (root / "metrics/evaluate/predictions_scratch.csv").read_text(encoding="utf-8").splitlines()
    assert len(predictions) - 1 == SIZES["test"]  # every given test row is measured
    assert prepared["label_names"] == ["0", "1"] and prepared["labeled_format"] == "pieces"
    evaluation = json.loads((root / "metrics/evaluate.json").read_text())
    for variant in ("pretrained", "scratch"):
        assert set(evaluation[variant]["f1_per_class_mean"]) == {"0", "1"}
    assert evaluation["gap"]["ci95_low"] <= evaluation["gap"]["accuracy_mean"] <= evaluation["gap"]["ci95_high"]
    checkpoint = torch.load(root / "models/finetuned/pretrained/seed0-0.pt", weights_only=True)
    assert checkpoint["label_names"] == ["0", "1"] and checkpoint["model_config"]["pad_id"] == 1


def test_a_checkpoint_that_does_not_fit_the_model_stops_validate_naming_the_param(course_repo):
    root, env = course_repo[:2]
    params_file = root / "params.yaml"
    original = params_file.read_text()
    model_before = (root / "models/pretrained/seed0.pt").read_bytes()
    try:
        params_file.write_text(original.replace(f"d_ff: {D_FF}", "d_ff: 32"))
        result = subprocess.run(["dvc", "repro"], cwd=root, env=env, capture_output=True, text=True)
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert "validate: error:" in output and "linear1.weight" in output and "set model.d_ff: 16" in output
        assert (root / "models/pretrained/seed0.pt").read_bytes() == model_before
    finally:
        params_file.write_text(original)
        run(["dvc", "repro", "validate"], root, env)


def _dvc(args: list[str], root: Path, env: dict[str, str]) -> str:
    result = subprocess.run(["dvc", *args], cwd=root, env=env, capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"dvc {' '.join(args)} failed:\n{output[-3000:]}"
    return output


def _files(root: Path, *folders: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for folder in folders for p in sorted((root / folder).rglob("*"))
            if p.is_file()}


def test_returning_to_fine_tune_params_already_run_restores_both_fine_tunes_from_the_run_cache(course_repo):
    """Back to params already run: both fine-tunes restored (a `cache: false` output once kept them out)."""
    root, env = course_repo[:2]

    def results() -> dict[str, bytes]:  # the fine-tunes of the course command's run: 0-0 of each variant
        return {name: data for name, data in _files(root, "models/finetuned", "metrics/finetune").items()
                if "/seed0-0." in name}

    before = results()
    assert len(before) == 6  # each variant's checkpoint, curve and summary
    fine_tunes = ["finetune_pretrained", "finetune_scratch"]  # what the param reaches first: evaluate and plot after
    changed = _dvc(["exp", "run", *fine_tunes, "-S", "finetune.freeze_backbone=true"], root, env)
    for stage in ("finetune_pretrained@0-0", "finetune_scratch@0-0"):
        assert f"Running stage '{stage}'" in changed
    assert "trainable of" in changed and "head on random features" in changed  # the frozen scratch model, said
    assert results() != before

    back = _dvc(["exp", "run", *fine_tunes, "-S", "finetune.freeze_backbone=false"], root, env)
    for stage in ("finetune_pretrained@0-0", "finetune_scratch@0-0"):
        assert f"Stage '{stage}' is cached - skipping run, checking out outputs" in back
        assert f"Running stage '{stage}'" not in back
    assert results() == before  # restored byte for byte, the DVC-cached summaries included
    # the course's headline is the pipeline's metrics file, read as any
    shown = _dvc(["metrics", "show", "--json", "metrics/headline.json"], root, env)
    workspace = next(iter(json.JSONDecoder().raw_decode(shown[shown.index("{"):])[0].values()))["data"]
    assert list(workspace) == ["metrics/headline.json"] and "scratch" in workspace["metrics/headline.json"]["data"]
    ignored = subprocess.run(["git", "check-ignore", "metrics/finetune/scratch/seed0-0.json"], cwd=root, env=env,
                             capture_output=True, text=True)
    assert ignored.returncode == 0  # a DVC-cached summary (git ignores it): out of the metrics views


def test_a_corpus_change_reruns_pretraining_and_its_fine_tune_but_not_the_scratch_one(course_repo):
    """The scratch fine-tune never reads the corpus (here pretraining a few steps, `init_from: ''`)."""
    root, env = course_repo[:2]
    raw = root / "data/course"
    reviews = (raw / "cls-books/train.review.spm").read_text(encoding="utf-8").splitlines()
    (raw / "unlabeled.spm").write_text("\n".join(f"{a} {b}" for a, b in zip(reviews, reviews[1:])) + "\n",
                                          encoding="utf-8")
    scratch = ("models/finetuned/scratch", "metrics/finetune/scratch", "data/tokenized", "data/prepared")
    before = _files(root, *scratch)
    yaml = YAML()
    params = yaml.load((root / "params.yaml").read_text())
    params["data"].update(corpus=["data/course/unlabeled.spm"], corpus_format="pieces")
    params["pretrain"].update(init_from="", max_steps=30, eval_every=15)
    with open(root / "params.yaml", "w") as handle:
        yaml.dump(params, handle)

    output = _dvc(["repro"], root, env)
    for stage in ("prepare", "tokenize", "pretrain@0", "finetune_pretrained@0-0"):
        assert f"Running stage '{stage}'" in output
    for stage in ("finetune_scratch@0-0", "baseline"):
        assert f"Running stage '{stage}'" not in output and f"Stage '{stage}' didn't change, skipping" in output
    assert _files(root, *scratch) == before
    assert json.loads((root / "metrics/pretrain/seed0.json").read_text())["steps"] > 0  # trained, not loaded
