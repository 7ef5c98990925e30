"""The real pipeline, end to end: `dvc repro` in a temporary git copy on tiny generated data.

Slow-ish (about two minutes on 2 cores): it starts every stage as DVC would and
checks each stage's outputs, the MLflow runs and their lineage, and that a
parameter change reruns only the stages that read it.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from pipeline_repo import (
    TINY_PARAMS,
    ChattrMissing,
    break_store,
    kill_repro_when,
    make_repo,
    merge,
    run,
    write_tiny_data,
)

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def pipeline_repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("pipeline")
    env = make_repo(root, TINY_PARAMS, write_tiny_data)
    run(["dvc", "repro"], root, env)
    FIRST_RUN.update(_results(root))
    return root, env


FIRST_RUN: dict[str, bytes] = {}  # the result files right after the first `dvc repro`


def _results(root: Path) -> dict[str, bytes]:
    """Everything a run produces that must not vary: dvc.lock (hashes of data, models) and metrics/."""
    files = {"dvc.lock": (root / "dvc.lock").read_bytes()}
    files.update({str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "metrics").rglob("*")) if p.is_file()})
    return files


def test_a_second_run_from_scratch_gives_byte_identical_results_and_opens_no_network_connection(
        pipeline_repo, tmp_path):
    """Same commit, params and data, a fresh copy: every result file and every output hash is the same. Every Python
    process of that `dvc repro` (dvc and each stage) records any DNS lookup or socket connection: with the data on
    disk (here: files) there is none: no MLflow telemetry, no hub, no update check."""
    (tmp_path / "repo").mkdir()
    env = with_network_recorder(make_repo(tmp_path / "repo", TINY_PARAMS, write_tiny_data), tmp_path)
    run(["dvc", "repro"], tmp_path / "repo", env)
    assert Path(env["NETWORK_LOG"]).read_text() == ""
    second = _results(tmp_path / "repo")
    assert sorted(second) == sorted(FIRST_RUN)
    different = [name for name in FIRST_RUN if FIRST_RUN[name] != second[name]]
    assert different == []
    assert b"seconds" not in second["metrics/pretrain/seed0.json"]
    assert b"tokens_per_s" not in second["metrics/pretrain/seed0/train.tsv"]


def test_every_stage_writes_its_outputs(pipeline_repo):
    root, env = pipeline_repo
    for path in [
        "data/prepared/train.tsv", "data/prepared_corpus/corpus_train.txt", "data/prepared/meta.json",
        "data/tokenized/spm.model", "data/tokenized_corpus/corpus_train.npy", "data/tokenized/test.npz",
        *[f"models/pretrained/seed{p}.pt" for p in (0, 1)], *[f"models/finetuned/{v}/seed{r}.pt" for v in VARIANTS
                                                              for r in RUNS],
        *[f"metrics/pretrain/seed{p}{f}" for p in (0, 1) for f in (".json", "/train.tsv", "/valid.tsv",
                                                                     "/samples.txt")],
        *[f"metrics/finetune/{v}/seed{r}.{e}" for v in VARIANTS for r in RUNS for e in ("tsv", "json")],
        "metrics/baseline.json", "metrics/evaluate.json", "metrics/headline.json", "metrics/evaluate/curves.tsv",
        "plots/finetune_accuracy.png", "plots/pretrain.png", "plots/confusion.png", "plots/finetune_loss.png",
        "metrics/evaluate/label_curve.tsv", "plots/label_curve.png",
    ]:
        assert (root / path).is_file() and (root / path).stat().st_size > 0, path
    assert (root / "plots/finetune_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    evaluation = json.loads((root / "metrics/evaluate.json").read_text())
    assert list(evaluation)[0] == "gap"  # the headline first, for whoever opens the file
    for variant in VARIANTS:
        report = evaluation[variant]
        assert len(report["accuracy_per_seed"]) == 2 and all(0 <= a <= 1 for a in report["accuracy_per_seed"])
        assert report["accuracy_mean"] == pytest.approx(sum(report["accuracy_per_seed"]) / 2)
        assert report["accuracy_std"] >= 0 and "first_epoch_val_accuracy_mean" in report
        assert set(report["f1_per_class_mean"]) == {"neg", "neutral", "pos"}
        assert len(report["val_accuracy_mean_per_epoch"]) == TINY_PARAMS["finetune"]["epochs"]
        seed0 = json.loads((root / f"metrics/finetune/{variant}/seed0-0.json").read_text())
        seed1 = json.loads((root / f"metrics/finetune/{variant}/seed1-0.json").read_text())
        assert report["first_epoch_val_accuracy_mean"] == pytest.approx(  # the curves are stored to 6 digits
            (seed0["first_epoch_val_accuracy"] + seed1["first_epoch_val_accuracy"]) / 2, abs=1e-5)
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
    assert len(epochs) == 1 + TINY_PARAMS["finetune"]["epochs"]
    assert json.loads((root / "timings/pretrain_seed0.json").read_text())["tokens_per_second"] > 0


VARIANTS = ("pretrained", "scratch")
RUNS = ("0-0", "1-0")  # pretraining runs 0 and 1 (TINY_PARAMS' pretrain.seeds), fine-tuning seed 0 each
PRETRAINS = {"pretrain@0", "pretrain@1"}
FINETUNES = {f"finetune_{v}@{r}" for v in VARIANTS for r in RUNS}
SCRATCH = {f"finetune_scratch@{r}" for r in RUNS}


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
        params[section][name] = YAML(typ="safe").load(value)  # plain values: a flow list in place of a block one
        # under a commented key makes ruamel glue the next lines together
        with open(params_file, "w") as handle:
            yaml.dump(params, handle)
        return _changed_stages(root, env)
    finally:
        params_file.write_text(original)


def test_a_parameter_change_reruns_only_the_stages_that_read_it(pipeline_repo):
    root, env = pipeline_repo
    # dvc status lists the changed stages; their downstream stages rerun through changed deps.
    assert _stages_to_rerun(root, env, "model.n_layers", "2") == PRETRAINS | SCRATCH
    assert _stages_to_rerun(root, env, "finetune.lr", "0.0004") == FINETUNES
    assert _stages_to_rerun(root, env, "pretrain.lr", "0.0123") == PRETRAINS
    # the objective sets the attention (model.attention: auto), so the scratch twin's architecture changes with it
    assert _stages_to_rerun(root, env, "pretrain.objective", "mlm") == PRETRAINS | SCRATCH
    assert _stages_to_rerun(root, env, "pretrain.mask_prob", "0.2") == PRETRAINS
    assert _stages_to_rerun(root, env, "pretrain.nsp", "true") == PRETRAINS
    assert _stages_to_rerun(root, env, "tokenizer.vocab_size", "50") == {"tokenize"}
    # evaluate fits TF-IDF on the label curve's subsets with the same params (none by default: it reruns in seconds)
    assert _stages_to_rerun(root, env, "baseline.c_values", "[1.0]") == {"baseline", "evaluate"}
    assert _stages_to_rerun(root, env, "evaluate.bootstrap_samples", "500") == {"evaluate"}
    dry = run(["dvc", "repro", "--dry", "-f", "finetune_scratch@0-0", "--downstream"], root, env)
    assert "'pretrain'" not in dry and "'prepare'" not in dry and "'baseline'" not in dry


def test_adding_a_pretraining_seed_runs_only_its_pretraining_its_fine_tunes_and_what_follows(pipeline_repo):
    root, env = pipeline_repo
    params_file = root / "params.yaml"
    original = params_file.read_text()
    new = {"pretrain@2", "finetune_pretrained@2-0", "finetune_scratch@2-0", "evaluate", "plot"}
    try:
        yaml = YAML()
        params = yaml.load(original)
        params["pretrain"]["seeds"] = [0, 1, 2]
        with open(params_file, "w") as handle:
            yaml.dump(params, handle)
        assert _changed_stages(root, env) == new
        log = run(["dvc", "repro"], root, env)
        ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")} - {"validate"}
        assert ran == new
        evaluation = json.loads((root / "metrics/evaluate.json").read_text())
        assert evaluation["n_pretraining_runs"] == 3 and len(evaluation["scratch"]["accuracy_per_seed"]) == 3
        assert evaluation["scratch"]["accuracy_per_seed"][:2] == json.loads(FIRST_RUN["metrics/evaluate.json"])[
            "scratch"]["accuracy_per_seed"]
    finally:
        params_file.write_text(original)
        run(["dvc", "repro"], root, env)  # back to two pretraining runs: evaluate and plot only
    assert _changed_stages(root, env) == set()
    # a second fine-tuning seed: one more fine-tune per pretraining run and variant, no pretraining
    assert _stages_to_rerun(root, env, "finetune.seeds", "[0, 1]") == {
        f"finetune_{v}@{p}-1" for v in VARIANTS for p in (0, 1)} | {"evaluate", "plot"}


def test_a_label_curve_size_runs_only_its_own_fine_tunes_then_evaluate_and_plot(pipeline_repo):
    """finetune.label_sizes: both variants from every pretraining run on the same stratified subset, TF-IDF on it
    too, a row of the curve per size with its interval; nothing that ran before reruns."""
    root, env = pipeline_repo
    params_file = root / "params.yaml"
    original = params_file.read_text()
    new = {f"finetune_{v}_labels@30-{r}" for v in VARIANTS for r in RUNS} | {"evaluate", "plot"}
    try:
        yaml = YAML()
        params = yaml.load(original)
        params["finetune"]["label_sizes"] = [30]
        with open(params_file, "w") as handle:
            yaml.dump(params, handle)
        log = run(["dvc", "repro"], root, env)
        ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")} - {"validate"}
        assert ran == new
        rows = list(csv.DictReader((root / "metrics/evaluate/label_curve.tsv").open(), delimiter="\t"))
        assert [(row["labels"], row["n_train"]) for row in rows] == [("30", "30"), ("all", "117")]
        for row in rows:
            assert float(row["gap_low"]) <= float(row["gap"]) <= float(row["gap_high"])
        for run_name in RUNS:  # the pretrained and scratch runs of one size trained on the same 30 examples
            summaries = [json.loads((root / f"metrics/finetune/{v}/seed{run_name}-n30.json").read_text())
                         for v in VARIANTS]
            assert all(0 <= summary["best_val_accuracy"] <= 1 for summary in summaries)
        assert (root / "plots/label_curve.png").stat().st_size > 0
        assert "30 labels: pretrained" in log
        # another size: its own fine-tunes and evaluate (plot then reruns through evaluate's new curve); none of 30's
        assert _stages_to_rerun(root, env, "finetune.label_sizes", "[30, 60]") == {
            f"finetune_{v}_labels@60-{r}" for v in VARIANTS for r in RUNS} | {"evaluate"}
    finally:
        params_file.write_text(original)
        run(["dvc", "repro"], root, env)  # back to the full split alone: evaluate and plot only
    assert _changed_stages(root, env) == set()
    assert (root / "metrics/evaluate.json").read_bytes() == FIRST_RUN["metrics/evaluate.json"]


def test_each_stage_is_one_mlflow_run_grouped_under_a_pipeline_run(pipeline_repo):
    root, _ = pipeline_repo
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`lmtransfer.kind` = 'stage'")
    first = [r for r in runs if r.data.tags["lmtransfer.pipeline_id"] == runs[-1].data.tags["lmtransfer.pipeline_id"]]
    by_name = {r.info.run_name: r for r in first}
    assert set(by_name) == {"prepare", "tokenize", "baseline", "evaluate", "plot"} | PRETRAINS | FINETUNES
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.`lmtransfer.kind` = 'pipeline'")
    assert {r.data.tags["mlflow.parentRunId"] for r in first} == {parents[-1].info.run_id}
    assert all(r.info.status == "FINISHED" for r in first)
    # lineage through checkpoint hashes: each pretrained fine-tune consumed the pretrain run's checkpoint,
    # evaluate consumed every fine-tune
    for seed in (0, 1):
        tuned = by_name[f"finetune_pretrained@{seed}-0"]
        assert tuned.data.tags["upstream_run_id"] == by_name[f"pretrain@{seed}"].info.run_id
        assert tuned.data.tags["stage"] == "finetune_pretrained" and tuned.data.params["seed"] == "0"
        assert tuned.data.params["pretrain_seed"] == str(seed)
    pretrain_id = by_name["pretrain@0"].info.run_id
    assert set(by_name["evaluate"].data.tags["upstream_run_id"].split(",")) == {
        by_name[name].info.run_id for name in FINETUNES}
    # declared params are logged with their params.yaml keys; a pretrained fine-tune's model.* from its checkpoint
    assert by_name["finetune_scratch@0-0"].data.params["model.d_model"] == "16"
    assert by_name["finetune_pretrained@0-0"].data.params["model.d_model"] == "16"
    # per-epoch curves share keys across both fine-tunes, step = epoch
    for name in FINETUNES:
        history = client.get_metric_history(by_name[name].info.run_id, "val_accuracy")
        assert sorted(m.step for m in history) == [1, 2]
    assert client.get_metric_history(pretrain_id, "val_loss")
    # artifacts in the project's mlartifacts/, as the README says (not MLflow's default mlruns/)
    assert by_name["pretrain@0"].info.artifact_uri.startswith((root / "mlartifacts").as_uri())
    assert any((root / "mlartifacts").rglob("samples.txt")) and not (root / "mlruns").exists()
    assert by_name["evaluate"].data.metrics["gap_accuracy_mean"] == pytest.approx(
        json.loads(FIRST_RUN["metrics/evaluate.json"])["gap"]["accuracy_mean"])
    # the pipeline run: every param of params.yaml, the headline, and a duration that spans its stages
    parent = client.get_run(parents[-1].info.run_id)
    report = json.loads(FIRST_RUN["metrics/evaluate.json"])
    assert parent.data.params["model.d_model"] == "16" and parent.data.params["finetune.seeds"] == "[0]"
    assert parent.data.params["pretrain.seeds"] == "[0, 1]"
    assert parent.data.metrics["pretrained"] == pytest.approx(report["pretrained"]["accuracy_mean"])
    assert parent.data.metrics["gap"] == pytest.approx(report["gap"]["accuracy_mean"])
    assert parent.data.metrics == pytest.approx(json.loads(FIRST_RUN["metrics/headline.json"]))
    assert parent.info.status == "FINISHED"
    assert parent.info.start_time <= min(r.info.start_time for r in first)
    assert parent.info.end_time >= max(r.info.end_time for r in first)
    # MLflow 3's UI opens a model-training experiment on its runs, not on the GenAI traces page
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"



def test_each_fine_tune_logs_an_mlflow_model_and_evaluate_registers_the_best_on_validation(pipeline_repo):
    """One MLflow model per fine-tune (the UI's Models view), its run tagged with it, and the registry's first
    version, which `champion` pointed at: the pretrained fine-tune with the best validation accuracy, tagged with
    the gap and the checkpoint's sha256."""
    root, _ = pipeline_repo
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}", registry_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    models = client.search_logged_models([experiment.experiment_id])
    runs = {r.info.run_id: r for r in client.search_runs([experiment.experiment_id])}
    tuned = {runs[m.source_run_id].info.run_name for m in models}
    assert FINETUNES <= tuned and {m.name for m in models} == {"classifier"}
    for model in models:
        tags = runs[model.source_run_id].data.tags
        assert tags["lmtransfer.model_id"] == model.model_id
    assert client.get_model_version_by_alias("lmtransfer-classification", "champion")
    champion = client.get_model_version("lmtransfer-classification", "1")  # the first run's (later tests rerun some)
    report = json.loads(FIRST_RUN["metrics/evaluate.json"])
    assert float(champion.tags["gap"]) == pytest.approx(report["gap"]["accuracy_mean"], abs=1e-6)
    validation = {p: json.loads((root / f"metrics/finetune/pretrained/seed{p}-0.json").read_text())["best_val_accuracy"]
                  for p in (0, 1)}
    best = max(validation, key=validation.get)  # the first of equals, as evaluate takes it
    assert champion.tags["run"] == f"{best}-0"
    checkpoint = root / f"models/finetuned/pretrained/seed{best}-0.pt"
    assert champion.tags["checkpoint_sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()


def test_temp_experiment_lands_in_the_main_mlflow_store(pipeline_repo):
    root, env = pipeline_repo
    run(["git", "add", "-A"], root, env)  # as a user would: commit the results, then experiment
    run(["git", "commit", "-qm", "results"], root, env)
    run(["dvc", "exp", "run", "--temp", "-n", "tiny-temp", "-S", "finetune.lr=0.0004"], root, env)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.dvc_exp_name = 'tiny-temp'")
    stages = {r.info.run_name for r in runs if r.data.tags.get("lmtransfer.kind") == "stage"}
    assert stages == FINETUNES | {"evaluate", "plot"}
    for r in runs:
        if r.data.tags.get("stage") == "finetune_scratch":
            assert len(client.get_metric_history(r.info.run_id, "val_accuracy")) == 2


def test_a_queued_sweep_is_compared_with_intervals_and_its_pipeline_runs_carry_the_same_numbers(pipeline_repo):
    """Two finetune.lr values queued (the larger first) and run through DVC's queue by two workers at once:
    `lmtransfer compare --by finetune.lr` lists every experiment in lr order with its interval and draws the figure;
    each experiment's MLflow pipeline run holds the headline `dvc exp show` shows for it."""
    root, env = pipeline_repo
    env = {k: v for k, v in env.items() if k != "LMTRANSFER_JOBS"}  # the queue's workers are the jobs counted
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-qm", "results", "--allow-empty"], root, env)  # experiments start from a commit
    for lr in ("0.008", "0.002"):
        run(["dvc", "exp", "run", "--queue", "-n", f"tiny-lr-{lr[-1]}", "-S", f"finetune.lr={lr}"], root, env)
    run(["dvc", "exp", "run", "--run-all", "-j", "2"], root, env)  # two queue workers, the cores shared
    table = run(["lmtransfer", "compare", "--by", "finetune.lr"], root, env)
    lines = [line for line in table.splitlines() if line.startswith("tiny-lr-")]
    assert [line.split()[0] for line in lines] == ["tiny-lr-2", "tiny-lr-8"]  # in lr order, not queue order
    assert all(" ± " in line and "[" in line for line in lines) and table.splitlines()[0].split()[:2] == [
        "experiment", "lr"] and "params: lr = finetune.lr" in table
    assert (root / "plots/compare-finetune.lr.png").read_bytes()[:4] == b"\x89PNG"
    shown = json.loads(run(["dvc", "exp", "show", "--json"], root, env))
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    for baseline in shown:
        for exp in baseline.get("experiments") or []:
            name = exp["name"]
            headline = exp["revs"][0]["data"]["metrics"]["metrics/headline.json"]["data"]
            parents = client.search_runs([experiment.experiment_id], filter_string=(
                f"tags.`lmtransfer.kind` = 'pipeline' and attributes.run_name = '{name}'"))
            assert parents and parents[0].data.metrics == pytest.approx(headline), name
            assert parents[0].info.status == "FINISHED"


def test_kill_9_during_pretraining_and_fine_tuning_then_dvc_repro_gives_the_uninterrupted_results(
    pipeline_repo, tmp_path
):
    """Killed twice at random moments (pretrain, then a fine-tune), `dvc repro` finishes with every result
    byte-identical to the uninterrupted run's, no MLflow run left RUNNING and no snapshot left behind."""
    resumable = merge(json.loads(json.dumps(TINY_PARAMS)), {"train": {"resume_every": 1}})  # not a DVC param
    env = make_repo(tmp_path, resumable, write_tiny_data)
    kill_repro_when(tmp_path, env, ".resume/pretrain*/*.pt")
    kill_repro_when(tmp_path, env, ".resume/finetune_*/*.pt")
    run(["dvc", "repro"], tmp_path, env)
    assert FIRST_RUN and _results(tmp_path) == FIRST_RUN  # the fixture's uninterrupted run
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    runs = client.search_runs([experiment.experiment_id])
    assert {r.info.status for r in runs} <= {"FINISHED", "KILLED"} and "FINISHED" in {r.info.status for r in runs}
    assert not list((tmp_path / ".resume").rglob("*.pt"))


NETWORK_RECORDER = """
import os, socket
_log = os.environ["NETWORK_LOG"]

def _record(what):
    with open(_log, "a") as handle:
        handle.write(f"{os.getpid()} {what}\\n")

_connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

def connect(self, address):
    if self.family != socket.AF_UNIX:
        _record(f"connect {address!r}")
    return _connect(self, address)

def connect_ex(self, address):
    if self.family != socket.AF_UNIX:
        _record(f"connect_ex {address!r}")
    return _connect_ex(self, address)

def getaddrinfo(host, *args, **kwargs):
    _record(f"getaddrinfo {host!r}")
    return _getaddrinfo(host, *args, **kwargs)

socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
"""


def with_network_recorder(env: dict[str, str], folder: Path) -> dict[str, str]:
    """`env` with a sitecustomize that logs every DNS lookup and non-local socket connection of each Python process
    to folder/network.log (checked to work first)."""
    recorder = folder / "recorder"
    recorder.mkdir()
    (recorder / "sitecustomize.py").write_text(NETWORK_RECORDER)
    log = folder / "network.log"
    log.write_text("")
    env = {**env, "PYTHONPATH": f"{recorder}{os.pathsep}{env['PYTHONPATH']}", "NETWORK_LOG": str(log)}
    probe = subprocess.run([sys.executable, "-c", "import socket; socket.getaddrinfo('localhost', 80)"], env=env)
    assert probe.returncode == 0 and "getaddrinfo 'localhost'" in log.read_text()  # the recorder works
    log.write_text("")
    return env


def _fingerprint(root: Path) -> dict[str, bytes]:
    outputs = ["data/inputs", "data/prepared", "data/prepared_corpus", "data/tokenized", "data/tokenized_corpus",
               "models", "metrics", "plots"]
    return {str(p): p.read_bytes() for out in outputs for p in sorted((root / out).rglob("*")) if p.is_file()}


@pytest.mark.parametrize("broken", ["missing file", "empty text", "single class", "bad encoding", "bad column",
                                    "vocab too large", "windows too long"])
def test_a_broken_input_stops_dvc_repro_with_a_clear_message_and_leaves_outputs_intact(pipeline_repo, broken):
    root, env = pipeline_repo
    params_file, before = root / "params.yaml", _fingerprint(root)
    original = params_file.read_text()
    bad = root / "raw/bad.csv"
    contents = {
        "empty text": "text,label\na fine film,pos\n   ,neg\nbad film,neg\n",
        "single class": "text,label\n" + "".join(f"a fine film {i},pos\n" for i in range(40)),
        "bad encoding": b"text,label\na fine film,pos\n" + b"caf\xe9 au lait,neg\n",
        "bad column": "review,label\na fine film,pos\n",
    }
    bad_params = {"vocab too large": ("vocab_size: 60", "vocab_size: 5000"),  # fails in tokenize unless checked
                  "windows too long": ("seq_len: 16", "seq_len: 5000")}  # fails in pretrain unless checked
    expected = {"missing file": "raw/nowhere.csv", "empty text": "line 3", "single class": "single class",
                "bad encoding": "line 3", "bad column": "data.text_column",
                "vocab too large": "tokenizer.vocab_size=5000 is too large for this corpus",
                "windows too long": "fewer than pretrain.seq_len + 1 = 5001"}
    try:
        if broken in contents:
            content = contents[broken]
            bad.write_bytes(content if isinstance(content, bytes) else content.encode())
        if broken in bad_params:
            assert original.count(bad_params[broken][0]) == 1
            params_file.write_text(original.replace(*bad_params[broken]))
        else:
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


@pytest.mark.parametrize("fault", ["random bytes", "cut to half", "read-only file", "read-only folder",
                                   "a directory"])  # the battery (benchmarks/fault_battery.py) tries the others
def test_a_broken_store_stops_the_run_before_dvc_removes_any_output(pipeline_repo, fault):
    """A parameter that reruns evaluate, with a store evaluate could not log to: validate stops the run, so DVC never
    removes evaluate's outputs (`metrics/evaluate.json`, `headline.json` are not in its cache)."""
    root, env = pipeline_repo
    params_file, before = root / "params.yaml", _fingerprint(root)
    original = params_file.read_text()
    assert original.count("bootstrap_samples: ") == 1
    try:
        undo = break_store(root, fault)
    except ChattrMissing:
        pytest.skip("chattr +i (an immutable file or folder) is not available here")
    try:
        params_file.write_text(re.sub(r"bootstrap_samples: \d+", "bootstrap_samples: 150", original))
        result = subprocess.run(["dvc", "repro"], cwd=root, env=env, capture_output=True, text=True)
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert f"validate: error: {root / 'mlflow.db'}" in output, output[-2000:]
        assert "Traceback" not in output and "Running stage 'evaluate'" not in output
        assert _fingerprint(root) == before
    finally:
        undo()
        params_file.write_text(original)
    run(["dvc", "repro", "validate"], root, env)


def test_a_bad_parameter_stops_the_stage_naming_the_key(pipeline_repo):
    root, env = pipeline_repo
    params_file = root / "params.yaml"
    original = params_file.read_text()
    try:
        params_file.write_text(original.replace("n_heads: 2", "n_heads: 3"))
        result = subprocess.run([sys.executable, "stages/pretrain.py", "--seed", "0"], cwd=root, env=env,
                                capture_output=True, text=True)
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
    assert "accuracy" in report and "val acc pretrained" in report and "TF-IDF" in report and "95% CI" in report
    generated = run([*lmtransfer, "generate", "the film", "--tokens", "5", "--samples", "2"], root, env)
    assert len(generated.strip().splitlines()) == 2
    assert all(line.startswith("the film") for line in generated.strip().splitlines())


def test_masked_lm_pretraining_runs_end_to_end_with_one_experiment_flag(tmp_path):
    """`dvc exp run -S pretrain.objective=mlm` (+ next-sentence prediction): every stage through evaluate and plot,
    a bidirectional model on both sides of the comparison, fill-in-the-blank samples, `lmtransfer fill`."""
    env = make_repo(tmp_path, TINY_PARAMS, write_tiny_data)
    run(["dvc", "exp", "run", "-S", "pretrain.objective=mlm", "-S", "pretrain.nsp=true"], tmp_path, env)
    summary = json.loads((tmp_path / "metrics/pretrain/seed0.json").read_text())
    assert summary["objective"] == "mlm" and summary["next_sentence"] is True
    assert 0 <= summary["val_masked_accuracy"] <= 1 and 0 <= summary["val_nsp_accuracy"] <= 1
    samples = (tmp_path / "metrics/pretrain/seed0/samples.txt").read_text()
    assert samples.startswith("[fill] the film <mask> -> ") and samples.count(" | ") == 4
    valid_log = (tmp_path / "metrics/pretrain/seed0/valid.tsv").read_text().splitlines()
    assert valid_log[0].split("\t") == ["step", "val_loss", "val_perplexity", "val_masked_accuracy", "val_nsp_loss",
                                        "val_nsp_accuracy", "phase"]
    assert json.loads((tmp_path / "metrics/evaluate.json").read_text())["n_seeds"] == 2
    assert all((tmp_path / "plots" / name).stat().st_size > 0 for name in ("finetune_accuracy.png", "pretrain.png"))
    code = ("import sys, torch; from lmtransfer.modeling.checkpoint import read_torch_file; "
            "print([read_torch_file(p)['model_config']['causal'] for p in sys.argv[1:]])")
    checkpoints = ["models/pretrained/seed1.pt", "models/finetuned/pretrained/seed0-0.pt",
                   "models/finetuned/scratch/seed1-0.pt"]
    assert run([sys.executable, "-c", code, *checkpoints], tmp_path, env).strip() == "[False, False, False]"
    filled = run(["lmtransfer", "fill", "the <mask> was great", "--top-k", "3"], tmp_path, env)
    assert filled.splitlines()[0] == "the <mask> was great" and len(filled.splitlines()) == 4
    refused = subprocess.run(["lmtransfer", "generate", "the film"], cwd=tmp_path, env=env, capture_output=True,
                             text=True)
    assert refused.returncode != 0 and "cannot continue a text left to right" in refused.stderr


def _curves(root: Path) -> dict[str, list[dict[str, str]]]:
    files = ["metrics/pretrain/seed0/train.tsv", "metrics/pretrain/seed0/valid.tsv",
             "metrics/finetune/pretrained/seed0-0.tsv"]
    return {name: list(csv.DictReader((root / name).open(), delimiter="\t")) for name in files}


def test_two_processes_under_torchrun_train_the_pipeline_like_one(tmp_path):
    """`dvc exp run -S train.nproc=2`: pretraining and a fine-tune as two gloo processes; the same losses as one
    process within float rounding (dropout 0), one MLflow run per stage."""
    params = merge(copy.deepcopy(TINY_PARAMS), {"model": {"dropout": 0.0}, "pretrain": {"seeds": [0]}})
    env = make_repo(tmp_path, params, write_tiny_data)
    target = "finetune_pretrained@0-0"
    run(["dvc", "repro", target], tmp_path, env)
    one = _curves(tmp_path)
    log = run(["dvc", "exp", "run", target, "-S", "train.nproc=2"], tmp_path, env)
    ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")} - {"validate"}
    assert ran == {"pretrain@0", target} and "2 processes under torchrun" in log
    assert log.count("pretrain@0: done in") == 1 and log.count(f"{target}: done in") == 1  # rank 0 alone reports
    two = _curves(tmp_path)
    for name, rows in one.items():
        assert len(two[name]) == len(rows), name
        for ours, theirs in zip(rows, two[name]):
            for key in (k for k in ours if k.endswith("loss")):
                assert float(theirs[key]) == pytest.approx(float(ours[key]), rel=1e-4), (name, key, ours["step"
                                                                                         if "step" in ours else "epoch"])
    assert all((tmp_path / path).stat().st_size > 0 for path in ("models/pretrained/seed0.pt",
                                                                 "models/finetuned/pretrained/seed0-0.pt"))
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.`lmtransfer.kind` = 'stage'")
    by_nproc = {}
    for r in runs:
        if r.info.run_name in ("pretrain@0", target):
            by_nproc.setdefault(r.data.params["train.nproc"], []).append(r.info.run_name)
    both = ["finetune_pretrained@0-0", "pretrain@0"]
    assert {nproc: sorted(names) for nproc, names in by_nproc.items()} == {"1": both, "2": both}
    assert all(r.info.status == "FINISHED" for r in runs)
