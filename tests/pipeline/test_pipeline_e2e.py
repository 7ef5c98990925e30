"""The real pipeline on a copy of the session's tiny run: outputs, MLflow runs and lineage, selective reruns, and
bad input or a broken store stopping `dvc repro` before any output is lost."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pipeline_repo as tiny
from pipeline_repo import ChattrMissing, break_store, changed_stages, run, stages_to_rerun, tiny_pipeline

pytestmark = pytest.mark.slow


def test_every_stage_writes_its_outputs(pipeline_repo):
    root, env = pipeline_repo
    for path in [
        "data/prepared/train.tsv", "data/prepared_corpus/corpus_train.txt", "data/prepared/meta.json",
        "data/tokenized/spm.model", "data/tokenized_corpus/corpus_train.npy", "data/tokenized/test.npz",
        *[f"models/pretrained/seed{p}.pt" for p in (0, 1)],
        *[f"models/finetuned/{v}/seed{r}.pt" for v in tiny.VARIANTS for r in tiny.RUNS],
        *[f"metrics/pretrain/seed{p}{f}" for p in (0, 1) for f in (".json", "/train.tsv", "/valid.tsv",
                                                                     "/samples.txt")],
        *[f"metrics/finetune/{v}/seed{r}.{e}" for v in tiny.VARIANTS for r in tiny.RUNS for e in ("tsv", "json")],
        "metrics/baseline.json", "metrics/evaluate.json", "metrics/headline.json", "metrics/evaluate/curves.tsv",
        "plots/finetune_accuracy.png", "plots/pretrain.png", "plots/confusion.png", "plots/finetune_loss.png",
        "metrics/evaluate/label_curve.tsv", "plots/label_curve.png",
    ]:
        assert (root / path).is_file() and (root / path).stat().st_size > 0, path
    assert (root / "plots/finetune_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    evaluation = json.loads((root / "metrics/evaluate.json").read_text())
    assert list(evaluation)[0] == "gap"  # the headline first, for whoever opens the file
    for variant in tiny.VARIANTS:
        report = evaluation[variant]
        assert len(report["accuracy_per_seed"]) == 2 and all(0 <= a <= 1 for a in report["accuracy_per_seed"])
        assert report["accuracy_mean"] == pytest.approx(sum(report["accuracy_per_seed"]) / 2)
        assert report["accuracy_std"] >= 0 and "first_epoch_val_accuracy_mean" in report
        assert set(report["f1_per_class_mean"]) == {"neg", "neutral", "pos"}
        assert len(report["val_accuracy_mean_per_epoch"]) == tiny.TINY_PARAMS["finetune"]["epochs"]
        summaries = [json.loads((root / f"metrics/finetune/{variant}/seed{r}.json").read_text()) for r in tiny.RUNS]
        firsts = [summary["first_epoch_val_accuracy"] for summary in summaries]
        assert report["first_epoch_val_accuracy_mean"] == pytest.approx(sum(firsts) / 2, abs=1e-5)  # 6 digits stored
    gap = evaluation["gap"]
    assert gap["accuracy_mean"] == pytest.approx(
        evaluation["pretrained"]["accuracy_mean"] - evaluation["scratch"]["accuracy_mean"])
    assert gap["ci95_low"] <= gap["accuracy_mean"] <= gap["ci95_high"] and 0 < gap["p_value"] <= 1
    assert set(gap["share"]) == {"pretraining_runs", "finetuning_seeds", "test_examples"}
    assert gap["spread"]["finetuning_seeds"] == 0.0  # one fine-tuning seed per pretraining run
    headline = json.loads((root / "metrics/headline.json").read_text())  # the answer's one metrics file
    assert headline["gap"] == gap["accuracy_mean"] and evaluation["n_seeds"] == 2
    assert (evaluation["n_pretraining_runs"], evaluation["n_finetuning_seeds"]) == (2, 1)
    for seed in (0, 1):  # the DVC-cached pretraining summaries travel in the git-tracked report
        summary = json.loads((root / f"metrics/pretrain/seed{seed}.json").read_text())
        assert evaluation["pretraining"]["per_seed"][str(seed)] == summary and summary["cpu_model"]
    shown = json.loads(run(["dvc", "metrics", "show", "--json"], root, env))
    assert [sorted(rev["data"]) for rev in shown.values()] == [["metrics/headline.json"]]  # the one declared
    table = run(["dvc", "metrics", "show"], root, {**env, "COLUMNS": "120"})
    assert max(len(line) for line in table.splitlines()) <= 120 and "head_start" in table
    baseline = json.loads((root / "metrics/baseline.json").read_text())
    assert evaluation["baseline"]["accuracy"] == baseline["accuracy"] and baseline["best_c"] in (0.5, 2.0)
    epochs = (root / "metrics/finetune/scratch/seed1-0.tsv").read_text().splitlines()
    assert epochs[0].split("\t") == ["epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy"]
    assert len(epochs) == 1 + tiny.TINY_PARAMS["finetune"]["epochs"]
    assert json.loads((root / "timings/pretrain_seed0.json").read_text())["tokens_per_second"] > 0


def test_the_run_is_up_to_date_and_editing_an_input_file_reruns_the_stages_that_read_it(pipeline_repo):
    root, env = pipeline_repo
    assert changed_stages(root, env) == set()
    manifest = json.loads((root / "data/inputs/data.json").read_text())
    assert json.loads((root / "data/inputs/checkpoint.json").read_text()) == {"inputs": []}
    assert {(e["key"], e["path"]) for e in manifest["inputs"]} == {
        ("data.train", "raw/labeled.tsv"), ("data.corpus", "raw/corpus-a.txt"), ("data.corpus", "raw/corpus-b.txt")}
    corpus = root / "raw/corpus-b.txt"
    original = corpus.read_bytes()
    try:
        corpus.write_bytes(original + b"one more line about a dull film\n")
        run(["dvc", "repro", "validate"], root, env)  # what every `dvc repro` starts with
        assert changed_stages(root, env) == {"prepare"}  # and everything downstream through changed outputs
    finally:
        corpus.write_bytes(original)
        run(["dvc", "repro", "validate"], root, env)
    assert changed_stages(root, env) == set()


def test_a_parameter_change_reruns_only_the_stages_that_read_it(pipeline_repo):
    root, env = pipeline_repo
    # dvc status lists the changed stages; their downstream stages rerun through changed deps.
    assert stages_to_rerun(root, env, "model.n_layers", "2") == tiny.PRETRAINS | tiny.SCRATCH
    assert stages_to_rerun(root, env, "finetune.lr", "0.0004") == tiny.FINETUNES
    assert stages_to_rerun(root, env, "pretrain.lr", "0.0123") == tiny.PRETRAINS
    # the objective sets the attention (model.attention: auto), so the scratch twin's architecture changes with it
    assert stages_to_rerun(root, env, "pretrain.objective", "mlm") == tiny.PRETRAINS | tiny.SCRATCH
    assert stages_to_rerun(root, env, "pretrain.mask_prob", "0.2") == tiny.PRETRAINS
    assert stages_to_rerun(root, env, "pretrain.nsp", "true") == tiny.PRETRAINS
    assert stages_to_rerun(root, env, "tokenizer.vocab_size", "50") == {"tokenize"}
    # evaluate fits TF-IDF on the label curve's subsets with the same params (none by default: it reruns in seconds)
    assert stages_to_rerun(root, env, "baseline.c_values", "[1.0]") == {"baseline", "evaluate"}
    assert stages_to_rerun(root, env, "evaluate.bootstrap_samples", "500") == {"evaluate"}
    dry = run(["dvc", "repro", "--dry", "-f", "finetune_scratch@0-0", "--downstream"], root, env)
    assert "'pretrain'" not in dry and "'prepare'" not in dry and "'baseline'" not in dry


def test_each_stage_is_one_mlflow_run_grouped_under_a_pipeline_run(pipeline_repo, first_run, tmp_path_factory):
    root, _ = pipeline_repo
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`lmtransfer.kind` = 'stage'")
    first = [r for r in runs if r.data.tags["lmtransfer.pipeline_id"] == runs[-1].data.tags["lmtransfer.pipeline_id"]]
    by_name = {r.info.run_name: r for r in first}
    assert set(by_name) == {"prepare", "tokenize", "baseline", "evaluate", "plot"} | tiny.PRETRAINS | tiny.FINETUNES
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.`lmtransfer.kind` = 'pipeline'")
    assert {r.data.tags["mlflow.parentRunId"] for r in first} == {parents[-1].info.run_id}
    assert all(r.info.status == "FINISHED" for r in first)
    # lineage through checkpoint hashes: a pretrained fine-tune from its pretrain run's, evaluate from every fine-tune
    for seed in (0, 1):
        tuned = by_name[f"finetune_pretrained@{seed}-0"]
        assert tuned.data.tags["upstream_run_id"] == by_name[f"pretrain@{seed}"].info.run_id
        assert tuned.data.tags["stage"] == "finetune_pretrained" and tuned.data.params["seed"] == "0"
        assert tuned.data.params["pretrain_seed"] == str(seed)
    pretrain_id = by_name["pretrain@0"].info.run_id
    assert set(by_name["evaluate"].data.tags["upstream_run_id"].split(",")) == {
        by_name[name].info.run_id for name in tiny.FINETUNES}
    # declared params are logged with their params.yaml keys; a pretrained fine-tune's model.* from its checkpoint
    assert {by_name[f"finetune_{v}@0-0"].data.params["model.d_model"] for v in tiny.VARIANTS} == {"16"}
    # per-epoch curves share keys across both fine-tunes, step = epoch
    for name in tiny.FINETUNES:
        history = client.get_metric_history(by_name[name].info.run_id, "val_accuracy")
        assert sorted(m.step for m in history) == [1, 2]
    assert client.get_metric_history(pretrain_id, "val_loss")
    # artifacts in the project's mlartifacts/, as the README says (not MLflow's default mlruns/)
    built = tiny_pipeline(tmp_path_factory)  # the first run was made there (this copy logs into its own)
    assert by_name["pretrain@0"].info.artifact_uri.startswith((built / "mlartifacts").as_uri())
    assert any((built / "mlartifacts").rglob("samples.txt")) and not (built / "mlruns").exists()
    report = json.loads(first_run["metrics/evaluate.json"])
    assert by_name["evaluate"].data.metrics["gap_accuracy_mean"] == pytest.approx(report["gap"]["accuracy_mean"])
    # the pipeline run: every param of params.yaml, the headline, and a duration that spans its stages
    parent = client.get_run(parents[-1].info.run_id)
    assert parent.data.params["model.d_model"] == "16" and parent.data.params["finetune.seeds"] == "[0]"
    assert parent.data.params["pretrain.seeds"] == "[0, 1]"
    assert parent.data.metrics["pretrained"] == pytest.approx(report["pretrained"]["accuracy_mean"])
    assert parent.data.metrics["gap"] == pytest.approx(report["gap"]["accuracy_mean"])
    assert parent.data.metrics == pytest.approx(json.loads(first_run["metrics/headline.json"]))
    assert parent.info.status == "FINISHED" and parent.info.start_time <= min(r.info.start_time for r in first)
    assert parent.info.end_time >= max(r.info.end_time for r in first)
    # MLflow 3's UI opens a model-training experiment on its runs, not on the GenAI traces page
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_each_fine_tune_logs_an_mlflow_model_and_evaluate_registers_the_best_on_validation(pipeline_repo, first_run):
    """One MLflow model per fine-tune; `champion`: the pretrained one best on validation, tagged gap and sha256."""
    root, env = pipeline_repo
    from mlflow import MlflowClient

    store = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=store, registry_uri=store)
    experiment = client.get_experiment_by_name("lmtransfer")
    models = client.search_logged_models([experiment.experiment_id])
    runs = {r.info.run_id: r for r in client.search_runs([experiment.experiment_id])}
    tuned = {runs[m.source_run_id].info.run_name for m in models}
    assert tiny.FINETUNES <= tuned
    for model in models:  # named for what it is, its validation and test accuracy beside it on the Models page
        assert model.name == runs[model.source_run_id].info.run_name.removeprefix("finetune_").replace("@", "-")
        assert {"best_val_accuracy", "test_accuracy", "test_macro_f1"} <= {metric.key for metric in model.metrics}
    assert all(runs[m.source_run_id].data.tags["lmtransfer.model_id"] == m.model_id for m in models)
    assert client.get_model_version_by_alias("lmtransfer-classification", "champion")
    champion = client.get_model_version("lmtransfer-classification", "1")  # the first run's
    report = json.loads(first_run["metrics/evaluate.json"])
    assert float(champion.tags["gap"]) == pytest.approx(report["gap"]["accuracy_mean"], abs=1e-6)
    validation = {p: json.loads((root / f"metrics/finetune/pretrained/seed{p}-0.json").read_text())["best_val_accuracy"]
                  for p in (0, 1)}
    best = max(validation, key=validation.get)  # the first of equals, as evaluate takes it
    assert champion.tags["run"] == f"{best}-0"
    checkpoint = root / f"models/finetuned/pretrained/seed{best}-0.pt"
    assert champion.tags["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    # `lmtransfer register` (make run, after dvc repro) gives the same version from evaluate's files: again nothing
    # new; in a store without the registry (a fresh clone, evaluate skipped as unchanged) the same tags
    again = run([sys.executable, "-m", "lmtransfer.cli", "register"], root, env)
    assert "version 1 (already registered) is @champion" in again
    client.delete_registered_model("lmtransfer-classification")
    run([sys.executable, "-m", "lmtransfer.cli", "register"], root, env)
    remade = client.get_model_version_by_alias("lmtransfer-classification", "champion")
    assert {k: v for k, v in remade.tags.items() if k != "git_commit"} == {
        k: v for k, v in champion.tags.items() if k != "git_commit"}


def _fingerprint(root: Path) -> dict[str, bytes]:
    outputs = ["data/inputs", "data/prepared", "data/prepared_corpus", "data/tokenized", "data/tokenized_corpus",
               "models", "metrics", "plots"]
    return {str(p): p.read_bytes() for out in outputs for p in sorted((root / out).rglob("*")) if p.is_file()}


BROKEN_INPUTS = {  # what raw/bad.csv holds (data.train names it), or a params.yaml change; what the error names
    "missing file": (None, "raw/nowhere.csv"),
    "empty text": ("text,label\na fine film,pos\n   ,neg\nbad film,neg\n", "line 3"),
    "single class": ("text,label\n" + "".join(f"a fine film {i},pos\n" for i in range(40)), "single class"),
    "bad encoding": (b"text,label\na fine film,pos\n" + b"caf\xe9 au lait,neg\n", "line 3"),
    "bad column": ("review,label\na fine film,pos\n", "data.text_column"),
    "vocab too large": (("vocab_size: 60", "vocab_size: 5000"),  # fails in tokenize unless checked
                        "tokenizer.vocab_size=5000 is too large for this corpus"),
    "windows too long": (("seq_len: 16", "seq_len: 5000"), "fewer than pretrain.seq_len + 1 = 5001"),  # in pretrain
}
# a store evaluate could not log to, with a param that reruns evaluate (its metrics files are not in DVC's cache);
# the battery (benchmarks/fault_battery.py) tries the other faults
STORE_CASES = ["store: random bytes", "store: cut to half", "store: read-only file", "store: read-only folder",
               "store: a directory"]


@pytest.mark.parametrize("case", [*BROKEN_INPUTS, *STORE_CASES])
def test_a_broken_input_or_store_stops_dvc_repro_in_validate_with_a_clear_message_and_outputs_intact(pipeline_repo,
                                                                                                     case):
    root, env = pipeline_repo
    params_file, before, bad = root / "params.yaml", _fingerprint(root), root / "raw/bad.csv"
    original = params_file.read_text()
    undo = lambda: None  # noqa: E731
    if case in STORE_CASES:
        try:
            undo = break_store(root, case.removeprefix("store: "))
        except ChattrMissing:
            pytest.skip("chattr +i (an immutable file or folder) is not available here")
        change = (re.search(r"bootstrap_samples: \d+", original).group(), "bootstrap_samples: 150")
        expected = f"validate: error: {root / 'mlflow.db'}"
    else:
        change, expected = BROKEN_INPUTS[case]
    try:
        if isinstance(change, str | bytes):
            bad.write_bytes(change if isinstance(change, bytes) else change.encode())
        if not isinstance(change, tuple):
            change = ("raw/labeled.tsv", "raw/nowhere.csv" if case == "missing file" else "raw/bad.csv")
        assert original.count(change[0]) == 1
        params_file.write_text(original.replace(*change))
        result = subprocess.run(["dvc", "repro"], cwd=root, env=env, capture_output=True, text=True)
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert "validate: error:" in output and expected in output, output[-2000:]
        assert "Traceback" not in output and re.findall(r"Running stage '([^']+)'", output) == ["validate"]
        assert _fingerprint(root) == before
    finally:
        undo()  # the store's own bytes back
        params_file.write_text(original)  # validate's outputs are as before (checked): nothing else to undo
        bad.unlink(missing_ok=True)


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
    assert "accuracy" in report and "val acc pretrained" in report and "TF-IDF" in report and "95% CI" in report
    generated = run([*lmtransfer, "generate", "the film", "--tokens", "5", "--samples", "2"], root, env)
    assert len(generated.strip().splitlines()) == 2
    assert all(line.startswith("the film") for line in generated.strip().splitlines())
