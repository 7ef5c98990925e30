"""The tiny pipeline changed as a user changes it, each on its own copy: it reruns what it must and no more."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from pipeline_repo import RUNS, VARIANTS, changed_stages, run, stages_to_rerun

pytestmark = pytest.mark.slow


def _set_params(root: Path, section: str, **values) -> None:
    yaml = YAML()
    params = yaml.load((root / "params.yaml").read_text())
    params[section].update(values)
    with open(root / "params.yaml", "w") as handle:
        yaml.dump(params, handle)


def _ran(log: str) -> set[str]:
    return {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")} - {"validate"}


def test_adding_a_pretraining_seed_runs_only_its_pretraining_its_fine_tunes_and_what_follows(own_pipeline_repo,
                                                                                              first_run):
    root, env = own_pipeline_repo
    new = {"pretrain@2", "finetune_pretrained@2-0", "finetune_scratch@2-0", "evaluate", "plot"}
    _set_params(root, "pretrain", seeds=[0, 1, 2])
    assert changed_stages(root, env) == new
    assert _ran(run(["dvc", "repro"], root, env)) == new
    evaluation = json.loads((root / "metrics/evaluate.json").read_text())
    assert evaluation["n_pretraining_runs"] == 3 and len(evaluation["scratch"]["accuracy_per_seed"]) == 3
    assert evaluation["scratch"]["accuracy_per_seed"][:2] == json.loads(first_run["metrics/evaluate.json"])[
        "scratch"]["accuracy_per_seed"]
    assert changed_stages(root, env) == set()
    # a second fine-tuning seed: one more fine-tune per pretraining run and variant, no pretraining
    assert stages_to_rerun(root, env, "finetune.seeds", "[0, 1]") == {
        f"finetune_{v}@{p}-1" for v in VARIANTS for p in (0, 1, 2)} | {"evaluate", "plot"}


def test_a_label_curve_size_runs_only_its_own_fine_tunes_then_evaluate_and_plot(own_pipeline_repo, first_run):
    """finetune.label_sizes: both variants on one subset, a curve row per size with its interval; nothing reruns."""
    root, env = own_pipeline_repo
    new = {f"finetune_{v}_labels@30-{r}" for v in VARIANTS for r in RUNS} | {"evaluate", "plot"}
    _set_params(root, "finetune", label_sizes=[30])
    log = run(["dvc", "repro"], root, env)
    assert _ran(log) == new
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
    first = json.loads(first_run["metrics/evaluate.json"])
    evaluation = json.loads((root / "metrics/evaluate.json").read_text())
    assert {key: evaluation[key] for key in first} == first  # the curve is beside the headline, not in it
    # another size: its own fine-tunes and evaluate (plot then reruns through evaluate's new curve); none of 30's
    assert stages_to_rerun(root, env, "finetune.label_sizes", "[30, 60]") == {
        f"finetune_{v}_labels@60-{r}" for v in VARIANTS for r in RUNS} | {"evaluate"}


def test_temp_experiment_lands_in_the_main_mlflow_store(own_pipeline_repo):
    """`dvc exp run --temp` runs in a folder of DVC's own: its stage runs still go to the checkout's store."""
    root, env = own_pipeline_repo
    run(["git", "add", "-A"], root, env)  # as a user would: commit the results, then experiment
    run(["git", "commit", "-qm", "results"], root, env)
    run(["dvc", "exp", "run", "--temp", "-n", "tiny-temp", "-S", "evaluate.bootstrap_samples=400"], root, env)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.dvc_exp_name = 'tiny-temp'")
    stages = {r.info.run_name: r for r in runs if r.data.tags.get("lmtransfer.kind") == "stage"}
    assert set(stages) == {"evaluate", "plot"}  # what the param reaches
    assert stages["evaluate"].data.params["evaluate.bootstrap_samples"] == "400"
    assert "gap_accuracy_mean" in stages["evaluate"].data.metrics


def test_a_queued_sweep_is_compared_with_intervals_and_its_pipeline_runs_carry_the_same_numbers(own_pipeline_repo):
    """Two queued values, two workers: `lmtransfer compare --by` in order with intervals; MLflow has each headline."""
    root, env = own_pipeline_repo
    env = {k: v for k, v in env.items() if k != "LMTRANSFER_JOBS"}  # the queue's workers are the jobs counted
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-qm", "results", "--allow-empty"], root, env)  # experiments start from a commit
    for samples in ("800", "200"):
        run(["dvc", "exp", "run", "--queue", "-n", f"tiny-bootstrap-{samples[0]}", "-S",
             f"evaluate.bootstrap_samples={samples}"], root, env)
    run(["dvc", "exp", "run", "--run-all", "-j", "2"], root, env)  # two queue workers, the cores shared
    table = run(["lmtransfer", "compare", "--by", "evaluate.bootstrap_samples"], root, env)
    lines = [line for line in table.splitlines() if line.startswith("tiny-bootstrap-")]
    assert [line.split()[0] for line in lines] == ["tiny-bootstrap-2", "tiny-bootstrap-8"]  # in order, not the queue's
    assert all(" ± " in line and "[" in line for line in lines) and table.splitlines()[0].split()[:2] == [
        "experiment", "bootstrap_samples"] and "params: bootstrap_samples = evaluate.bootstrap_samples" in table
    assert (root / "plots/compare-evaluate.bootstrap_samples.png").read_bytes()[:4] == b"\x89PNG"
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
