"""The real pipeline, end to end: `dvc repro` in a temporary git copy on tiny generated data.

Slow-ish (about two minutes on 2 cores): it starts every stage as DVC would and
checks each stage's outputs, the MLflow runs and their lineage, and that a
parameter change reruns only the stages that read it.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_repo import make_repo, run
from ruamel.yaml import YAML

pytestmark = pytest.mark.slow

POSITIVE = ["great", "wonderful", "moving", "brilliant", "funny", "charming", "superb"]
NEGATIVE = ["awful", "boring", "dull", "clumsy", "tedious", "bland", "dreadful"]
NEUTRAL = ["the", "film", "movie", "story", "actors", "plot", "was", "is", "a", "and", "script", "ending"]

TINY_PARAMS = {
    "data": {"source": "files", "train": "raw/labeled.tsv", "corpus": ["raw/corpus*.txt"],
             "valid_fraction": 0.15, "test_fraction": 0.2},
    "tokenizer": {"vocab_size": 60},
    "model": {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 16},
    "pretrain": {"max_steps": 12, "batch_size": 8, "seq_len": 16, "eval_every": 6, "eval_batches": 2,
                 "warmup_steps": 2, "generate_tokens": 5, "prompts": ["the film"]},
    "finetune": {"epochs": 2, "batch_size": 16, "max_len": 24, "warmup_steps": 2},
    "train": {"log_every": 4},
}


def _sentence(rng: random.Random, sentiment: list[str]) -> str:
    words = rng.sample(NEUTRAL, 4) + rng.sample(sentiment, 2)
    rng.shuffle(words)
    return " ".join(words)


def write_tiny_data(root: Path) -> None:
    rng = random.Random(0)
    raw = root / "raw"
    raw.mkdir()
    rows = ["text\tlabel"]
    classes = [("neg", NEGATIVE), ("neutral", NEUTRAL), ("pos", POSITIVE)]  # three string classes
    for index in range(180):
        name, words = classes[index % 3]
        rows.append(f"{_sentence(rng, words)} {index}\t{name}")
    (raw / "labeled.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    corpus = [_sentence(rng, rng.choice([POSITIVE, NEGATIVE])) + f" line {i}" for i in range(400)]
    (raw / "corpus-a.txt").write_text("\n".join(corpus[:250]) + "\n", encoding="utf-8")
    (raw / "corpus-b.txt").write_text("\n".join(corpus[250:]) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def pipeline_repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("pipeline")
    env = make_repo(root, TINY_PARAMS, write_tiny_data)
    run(["dvc", "repro"], root, env)
    return root, env


def test_every_stage_writes_its_outputs(pipeline_repo):
    root, _ = pipeline_repo
    for path in [
        "data/prepared/train.tsv", "data/prepared/corpus_train.txt", "data/prepared/meta.json",
        "data/tokenized/spm.model", "data/tokenized/corpus_train.npy", "data/tokenized/test.npz",
        "models/pretrained.pt", "models/finetuned_pretrained.pt", "models/finetuned_scratch.pt",
        "metrics/pretrain.json", "metrics/pretrain/train.tsv", "metrics/pretrain/valid.tsv",
        "metrics/pretrain/samples.txt", "metrics/finetune_pretrained/epochs.tsv",
        "metrics/finetune_scratch/epochs.tsv", "metrics/evaluate.json",
        "plots/finetune_accuracy.png", "plots/pretrain.png", "plots/confusion.png", "plots/finetune_loss.png",
    ]:
        assert (root / path).is_file() and (root / path).stat().st_size > 0, path
    assert (root / "plots/finetune_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    evaluation = json.loads((root / "metrics/evaluate.json").read_text())
    for variant in ("pretrained", "scratch"):
        assert 0.0 <= evaluation[variant]["accuracy"] <= 1.0
        assert set(evaluation[variant]["f1_per_class"]) == {"neg", "neutral", "pos"}
    assert evaluation["accuracy_gap"] == pytest.approx(
        evaluation["pretrained"]["accuracy"] - evaluation["scratch"]["accuracy"])
    epochs = (root / "metrics/finetune_scratch/epochs.tsv").read_text().splitlines()
    assert epochs[0].split("\t")[:5] == ["epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy"]
    assert len(epochs) == 1 + TINY_PARAMS["finetune"]["epochs"]


def _changed_stages(root: Path, env: dict[str, str]) -> set[str]:
    """What `dvc status` would rerun, leaving out validate (it runs every time, by design)."""
    status = json.loads(run(["dvc", "status", "--json"], root, env) or "{}")
    return {stage.split(":")[-1] for stage in status} - {"validate"}


def test_pipeline_is_up_to_date_after_repro(pipeline_repo):
    root, env = pipeline_repo
    assert _changed_stages(root, env) == set()
    manifest = json.loads((root / "data/inputs/data.json").read_text())
    assert json.loads((root / "data/inputs/checkpoint.json").read_text()) == {"inputs": []}
    assert {(e["key"], e["path"]) for e in manifest["inputs"]} == {
        ("data.train", "raw/labeled.tsv"), ("data.corpus", "raw/corpus-a.txt"), ("data.corpus", "raw/corpus-b.txt")}


def test_editing_an_input_file_reruns_the_stages_that_read_it(pipeline_repo):
    root, env = pipeline_repo
    corpus = root / "raw/corpus-b.txt"
    original = corpus.read_bytes()
    try:
        corpus.write_bytes(original + b"one more line about a dull film\n")
        run(["dvc", "repro", "validate"], root, env)  # what every `dvc repro` starts with
        assert _changed_stages(root, env) == {"prepare"}  # and everything downstream through changed outputs
    finally:
        corpus.write_bytes(original)
        run(["dvc", "repro", "validate"], root, env)
    assert _changed_stages(root, env) == set()


def _stages_to_rerun(root: Path, env: dict[str, str], key: str, value: str) -> set[str]:
    params_file = root / "params.yaml"
    original = params_file.read_text()
    try:
        yaml = YAML()
        params = yaml.load(original)
        section, name = key.split(".")
        params[section][name] = yaml.load(value)
        with open(params_file, "w") as handle:
            yaml.dump(params, handle)
        return _changed_stages(root, env)
    finally:
        params_file.write_text(original)


def test_a_parameter_change_reruns_only_the_stages_that_read_it(pipeline_repo):
    root, env = pipeline_repo
    # dvc status lists the changed stages; their downstream stages rerun through changed deps.
    assert _stages_to_rerun(root, env, "model.n_layers", "2") == {"pretrain", "finetune_scratch"}
    assert _stages_to_rerun(root, env, "finetune.lr", "0.001") == {"finetune_pretrained", "finetune_scratch"}
    assert _stages_to_rerun(root, env, "pretrain.lr", "0.0123") == {"pretrain"}
    assert _stages_to_rerun(root, env, "tokenizer.vocab_size", "50") == {"tokenize"}
    dry = run(["dvc", "repro", "--dry", "-f", "finetune_scratch", "--downstream"], root, env)
    assert "'pretrain'" not in dry and "'prepare'" not in dry


def test_each_stage_is_one_mlflow_run_grouped_under_a_pipeline_run(pipeline_repo):
    root, _ = pipeline_repo
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    runs = client.search_runs([experiment.experiment_id])
    stages = {r.data.tags.get("stage"): r for r in runs if r.data.tags.get("lmtransfer.kind") == "stage"}
    assert set(stages) == {"prepare", "tokenize", "pretrain", "finetune_pretrained", "finetune_scratch",
                           "evaluate", "plot"}
    parents = [r for r in runs if r.data.tags.get("lmtransfer.kind") == "pipeline"]
    assert len(parents) == 1
    assert {r.data.tags["mlflow.parentRunId"] for r in stages.values()} == {parents[0].info.run_id}
    assert all(r.info.status == "FINISHED" for r in stages.values())
    # lineage: the pretrained fine-tune consumed the pretrain run's checkpoint
    assert stages["finetune_pretrained"].data.tags["upstream_run_id"] == stages["pretrain"].info.run_id
    # declared params are logged with their params.yaml keys
    assert stages["finetune_scratch"].data.params["model.d_model"] == "16"
    assert "model.d_model" not in stages["finetune_pretrained"].data.params
    # per-epoch curves share keys across both fine-tunes, step = epoch
    for name in ("finetune_pretrained", "finetune_scratch"):
        history = client.get_metric_history(stages[name].info.run_id, "val_accuracy")
        assert sorted(m.step for m in history) == [1, 2]
    assert client.get_metric_history(stages["pretrain"].info.run_id, "val_loss")


def test_temp_experiment_lands_in_the_main_mlflow_store(pipeline_repo):
    root, env = pipeline_repo
    run(["git", "add", "-A"], root, env)  # as a user would: commit the results, then experiment
    run(["git", "commit", "-qm", "results"], root, env)
    run(["dvc", "exp", "run", "--temp", "-n", "tiny-temp", "-S", "finetune.lr=0.001"], root, env)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.dvc_exp_name = 'tiny-temp'")
    stages = {r.data.tags.get("stage") for r in runs if r.data.tags.get("lmtransfer.kind") == "stage"}
    assert stages == {"finetune_pretrained", "finetune_scratch", "evaluate", "plot"}
    for r in runs:
        if r.data.tags.get("stage") == "finetune_scratch":
            assert len(client.get_metric_history(r.info.run_id, "val_accuracy")) == 2


def _fingerprint(root: Path) -> dict[str, bytes]:
    outputs = ["data/prepared", "data/tokenized", "models", "metrics", "plots"]
    return {str(p): p.read_bytes() for out in outputs for p in sorted((root / out).rglob("*")) if p.is_file()}


@pytest.mark.parametrize("broken", ["missing file", "empty text", "single class", "bad encoding", "bad column"])
def test_a_broken_input_stops_dvc_repro_with_a_clear_message_and_leaves_outputs_intact(pipeline_repo, broken):
    root, env = pipeline_repo
    params_file, before = root / "params.yaml", _fingerprint(root)
    original = params_file.read_text()
    bad = root / "raw/bad.csv"
    contents = {
        "empty text": "text,label\na fine film,pos\n   ,neg\nbad film,neg\n",
        "single class": "text,label\n" + "".join(f"a fine film {i},pos\n" for i in range(40)),
        "bad encoding": "text,label\na fine film,pos\n".encode() + b"caf\xe9 au lait,neg\n",
        "bad column": "review,label\na fine film,pos\n",
    }
    expected = {"missing file": "raw/nowhere.csv", "empty text": "line 3", "single class": "single class",
                "bad encoding": "line 3", "bad column": "data.text_column"}
    try:
        if broken in contents:
            content = contents[broken]
            bad.write_bytes(content if isinstance(content, bytes) else content.encode())
        target = "raw/nowhere.csv" if broken == "missing file" else "raw/bad.csv"
        params_file.write_text(original.replace("raw/labeled.tsv", target))
        result = subprocess.run(["dvc", "repro"], cwd=root, env=env, capture_output=True, text=True)
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert "validate: error:" in output and expected[broken] in output, output[-2000:]
        assert "Traceback" not in output
        assert "Running stage 'prepare'" not in output
        assert _fingerprint(root) == before
    finally:
        params_file.write_text(original)
        bad.unlink(missing_ok=True)
        run(["dvc", "repro", "validate"], root, env)


def test_a_bad_parameter_stops_the_stage_naming_the_key(pipeline_repo):
    root, env = pipeline_repo
    params_file = root / "params.yaml"
    original = params_file.read_text()
    try:
        params_file.write_text(original.replace("n_heads: 2", "n_heads: 3"))
        result = subprocess.run([sys.executable, "stages/pretrain.py"], cwd=root, env=env, capture_output=True,
                                text=True)
        assert result.returncode == 1
        assert "model.d_model" in result.stderr and "model.n_heads" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        params_file.write_text(original)


def test_the_cli_uses_the_pipeline_models(pipeline_repo):
    root, env = pipeline_repo
    lmtransfer = [sys.executable, "-m", "lmtransfer.cli"]
    predicted = run([*lmtransfer, "predict", "a great and wonderful film", "an awful boring plot"], root, env)
    lines = predicted.strip().splitlines()
    assert len(lines) == 2
    for line in lines:
        label, probability, _ = line.split("\t")
        assert label in {"neg", "neutral", "pos"} and 1 / 3 <= float(probability) <= 1.0
    report = run([*lmtransfer, "results"], root, env)
    assert "accuracy" in report and "val acc (pretrained)" in report
    generated = run([*lmtransfer, "generate", "the film", "--tokens", "5", "--samples", "2"], root, env)
    assert len(generated.strip().splitlines()) == 2
    assert all(line.startswith("the film") for line in generated.strip().splitlines())
