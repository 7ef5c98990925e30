"""`dvc repro translation/dvc.yaml` on tiny pairs of the user's own: outputs, `translate`, reruns, bad input, kill."""

from __future__ import annotations

import csv
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline_repo import break_store, copy_repo, kill_repro_when, make_repo, run

pytestmark = pytest.mark.slow

# A toy language pair: each English word has one "French" word, in the same order.
LEXICON = {"the": "le", "cat": "chat", "dog": "chien", "sees": "voit", "eats": "mange", "bird": "oiseau",
           "fish": "poisson", "small": "petit", "big": "grand", "red": "rouge", "sleeps": "dort", "and": "et"}
TINY_TRANSLATION = {
    "data": {"source": "files", "train": "raw/pairs.tsv", "valid_fraction": 0.1, "test_fraction": 0.1},
    "tokenizer": {"vocab_size": 45},
    "model": {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32},
    "pretrain": {"seeds": [0, 1], "max_steps": 12, "batch_size": 8, "seq_len": 16, "eval_every": 6, "eval_batches": 2,
                 "warmup_steps": 2, "generate_tokens": 5, "prompts": ["the cat"]},
    "finetune": {"seeds": [0], "epochs": 2, "batch_size": 16, "warmup_steps": 2, "max_len": 16,
                 "max_steps": 18, "valid_sentences": 10, "examples": ["the cat sleeps"]},
    "evaluate": {"beam_size": 2, "bootstrap_samples": 100, "lab_sentences": "../raw/lab.tsv"},
    "train": {"log_every": 4},
}


def write_pairs(root: Path) -> None:
    """raw/pairs.tsv: 240 distinct toy sentence pairs; every fourth is two clauses, which prepare also cuts."""
    rng, words, seen = random.Random(0), list(LEXICON), set()
    while len(seen) < 240:
        seen.add(" ".join(rng.choice(words) for _ in range(rng.randint(3, 6))))
    sentences = sorted(seen)
    pairs = [(s, " ".join(LEXICON[w] for w in s.split())) for s in sentences]
    for i in range(0, len(pairs), 4):
        (s, t), (s2, t2) = pairs[i], pairs[-1 - i]
        pairs[i] = (f"{s}. {s2}.", f"{t}. {t2}.")
    (root / "raw").mkdir()
    rows = ["source\ttarget"] + [f"{s}\t{t}" for s, t in pairs]
    (root / "raw" / "pairs.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    lab = "source\ttarget\nthe cat sleeps\tle chat dort\nthe dog eats\tle chien mange\n"
    (root / "raw" / "lab.tsv").write_text(lab, encoding="utf-8")


@pytest.fixture(scope="module")
def translation_repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("translation")
    env = make_repo(root, TINY_TRANSLATION, write_pairs, params_file="translation/params.yaml")
    run(["dvc", "repro", "translation/dvc.yaml"], root, env)
    FIRST_FINE_TUNES.update(_fine_tune_results(root))
    return root, env


FIRST_FINE_TUNES: dict[str, object] = {}  # the fixture's fine-tune results, before any test changes its copy


def _fine_tune_results(root: Path) -> dict[str, object]:
    """What the fine-tune stages produce: their curves and summaries, and their outputs' hashes in dvc.lock."""
    from ruamel.yaml import YAML

    stages = YAML(typ="safe").load((root / "translation" / "dvc.lock").read_text())["stages"]
    results: dict[str, object] = {name: [(out["path"], out["md5"]) for out in stage["outs"]]
                                  for name, stage in stages.items() if name.startswith("finetune_")}
    folder = root / "translation" / "metrics" / "finetune"
    results.update({str(p.relative_to(root)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()})
    return results


def test_every_stage_writes_its_outputs_the_scores_come_with_intervals_and_translate_uses_them(translation_repo):
    root, env = translation_repo
    out = root / "translation"
    for name in ("0-0", "1-0"):
        for variant in ("pretrained", "scratch"):
            assert (out / f"models/finetuned/{variant}/seed{name}.pt").is_file()
            rows = list(csv.DictReader(open(out / f"metrics/finetune/{variant}/seed{name}.tsv"), delimiter="\t"))
            assert [int(r["epoch"]) for r in rows] == [1, 2] and all(float(r["val_loss"]) > 0 for r in rows)
    for seed in (0, 1):  # one pretraining run per pretrain.seeds
        assert (out / f"models/pretrained/seed{seed}.pt").is_file()
        assert (out / f"metrics/pretrain/seed{seed}.json").is_file()
    report = json.loads((out / "metrics/evaluate.json").read_text())
    headline = json.loads((out / "metrics/headline.json").read_text())
    assert report["runs"] == ["0-0", "1-0"] and len(report["pretraining"]["val_perplexity_per_run"]) == 2
    for variant in ("pretrained", "scratch"):
        section = report[variant]
        assert len(section["bleu_per_seed"]) == 2 and len(section["chrf_per_seed"]) == 2
        assert section["bleu_ci95_low"] <= section["bleu_mean"] <= section["bleu_ci95_high"]
        assert 0 <= section["repeats_mean"] <= 1
    assert report["gap"]["bleu_ci95_low"] <= report["gap"]["bleu_ci95_high"]
    assert report["signatures"]["bleu"].startswith("nrefs:1|")
    assert headline["bleu_pretrained"] == report["pretrained"]["bleu_mean"] and headline["n_seeds"] == 2
    assert headline["n_pretraining_runs"] == 2
    clauses = list(csv.DictReader(open(out / "metrics/evaluate/test_clause_translations.tsv"), delimiter="\t"))
    assert report["clauses"]["n_test_sentences"] == len(clauses) > 0  # the two-clause test pairs, cut
    assert headline["clauses_bleu_pretrained"] == report["clauses"]["pretrained"]["bleu_mean"]
    assert json.loads((out / "data/prepared/meta.json").read_text())["clause_pairs"] > 0
    test_pairs = (out / "data/prepared/test.tsv").read_text().splitlines()[1:]
    table = list(csv.DictReader(open(out / "metrics/evaluate/test_translations.tsv"), delimiter="\t"))
    assert len(table) == len(test_pairs) == 24
    assert set(table[0]) == {"source", "reference", "pretrained_seed0-0", "pretrained_seed1-0", "scratch_seed0-0",
                             "scratch_seed1-0"}
    lab = list(csv.DictReader(open(out / "metrics/evaluate/lab_sentences.tsv"), delimiter="\t"))
    assert [row["source"] for row in lab] == ["the cat sleeps", "the dog eats"] and report["lab"]["n_sentences"] == 2
    assert 0 <= headline["lab_chrf_pretrained"] <= 100
    for name in ("finetune_bleu.png", "pretrain.png", "test_scores.png"):
        assert (out / "plots" / name).stat().st_size > 1000
    held_out = {line.split("\t")[0] for line in test_pairs}
    corpus = set((out / "data/prepared_corpus/corpus_train.txt").read_text().splitlines())
    assert not held_out & corpus  # no test sentence was pretrained on
    translated = run([sys.executable, "-m", "lmtransfer.cli", "translate", "the cat sleeps", "the big dog eats",
                      "--beam-size", "2"], root, env)
    # one line per sentence, in order; the tiny model may well translate one as nothing, so a line can be empty
    assert translated.endswith("\n") and len(translated[:-1].split("\n")) == 2


def test_a_decoding_parameter_reruns_only_evaluate_and_plot(translation_repo):
    """prepare runs every time (it reads the user's files); its outputs unchanged, nothing else reruns."""
    root, env = translation_repo
    params = root / "translation/params.yaml"
    params.write_text(params.read_text().replace("beam_size: 2", "beam_size: 1"))
    out = run(["dvc", "repro", "translation/dvc.yaml"], root, env)
    ran = sorted(line.split("'")[1].split(":")[1] for line in out.splitlines() if line.startswith("Running stage"))
    assert ran == ["evaluate", "plot", "prepare"]


def _outputs(root: Path) -> dict[Path, bytes]:
    folders = [root / "translation" / name for name in ("metrics", "plots", "data", "models")]
    return {p: p.read_bytes() for folder in folders for p in sorted(folder.rglob("*")) if p.is_file()}


PARAMS = "translation/params.yaml"
# (the file, its text, what replaces it), the message. Each param a later stage refused only after DVC had removed
# its outputs (issue 71); a store with a directory in its place (bootstrap_samples reruns evaluate, which logs to it).
REFUSALS = {
    "no target column": (("raw/pairs.tsv", "source\ttarget", "source\ttranslation"),
                         "raw/pairs.tsv: no column 'target' (data.target_column)"),
    "a broken store": ((PARAMS, "bootstrap_samples: 100", "bootstrap_samples: 150"), "mlflow.db is a directory"),
    "vocabulary too small": ((PARAMS, "vocab_size: 45", "vocab_size: 16"),  # tokenize's sentencepiece
                             "tokenizer.vocab_size=16 is too small for this corpus"),
    "lab sentences missing": ((PARAMS, "lab_sentences: ../raw/lab.tsv", "lab_sentences: ../raw/nolab.tsv"),
                              "../raw/nolab.tsv: file not found (set by evaluate.lab_sentences)"),  # evaluate's
    "no pair under max_len": ((PARAMS, "max_len: 16", "max_len: 4"),  # the fine-tunes: 0 pairs, then a TypeError
                              "finetune.max_len=4: none of the"),
    "an empty example": ((PARAMS, "- the cat sleeps", "- ''"),  # translated every epoch
                         "finetune.examples: example 1 of 1 is empty"),
    "init_from a fine-tune": ((PARAMS, "init_from: ''", "init_from: models/finetuned/pretrained/seed0-0.pt"),
                              "written by stage 'finetune_pretrained'"),  # a pretraining that never settles
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_input_stops_prepare_before_any_other_stage_and_every_output_stays_byte_identical(translation_repo, case):
    root, env = translation_repo
    (name, old, new), expected = REFUSALS[case]
    changed, before = root / name, _outputs(root)
    original = changed.read_text()
    assert original.count(old) == 1
    undo = break_store(root, "a directory") if case == "a broken store" else (lambda: None)
    try:
        changed.write_text(original.replace(old, new))
        result = subprocess.run(["dvc", "repro", "translation/dvc.yaml"], cwd=root, env=env, capture_output=True,
                                text=True)
        output = result.stdout + result.stderr
        assert result.returncode != 0 and "prepare: error: " in output and expected in output, output[-2000:]
        assert "Traceback" not in output
        assert re.findall(r"Running stage '([^']+)'", output) == ["translation/dvc.yaml:prepare"]
        assert _outputs(root) == before
    finally:
        undo()
        changed.write_text(original)


def test_kill_9_during_translation_fine_tuning_then_dvc_repro_gives_the_uninterrupted_results(translation_repo,
                                                                                              tmp_path):
    """kill -9 once the fine-tune saved a snapshot: `dvc repro` resumes to the first run's bytes, the run closed."""
    stage = "finetune_pretrained@0-0"
    first = {key: value for key, value in FIRST_FINE_TUNES.items() if key == stage or "pretrained/seed0-0." in key}
    assert len(first) == 3  # the stage's outputs in dvc.lock, its curve and its summary
    tmp_path = tmp_path / "repo"
    env = copy_repo(translation_repo[0], tmp_path)  # the fine-tune's inputs as the first run left them
    target = f"translation/dvc.yaml:{stage}"
    since = time.time() * 1000
    # -s -f: this stage alone, run again (DVC would otherwise restore it from its run-cache)
    kill_repro_when(tmp_path, env, "translation/.resume/finetune_pretrained_seed0-0/*.pt", "-s", "-f", target,
                    latest=0.05)
    assert not (tmp_path / "translation/metrics/finetune/pretrained/seed0-0.json").exists()  # killed before its end
    output = run(["dvc", "repro", "-s", "-f", target], tmp_path, env)
    assert "resumed from the snapshot after epoch 1" in output
    assert {key: value for key, value in _fine_tune_results(tmp_path).items() if key in first} == first
    assert not list((tmp_path / "translation" / ".resume").rglob("*.pt"))
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string=f"attributes.run_name = '{stage}' and attributes.start_time >= {since:.0f}")
    assert sorted(r.info.status for r in runs) == ["FINISHED", "KILLED"]  # the killed run is closed as such
