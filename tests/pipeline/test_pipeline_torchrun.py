"""Two processes under torchrun train the tiny pipeline's stages as one process does."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest

from pipeline_repo import copy_repo, run, tiny_pipeline

pytestmark = pytest.mark.slow


def _curves(root: Path) -> dict[str, list[dict[str, str]]]:
    files = ["metrics/pretrain/seed0/train.tsv", "metrics/pretrain/seed0/valid.tsv",
             "metrics/finetune/pretrained/seed0-0.tsv"]
    return {name: list(csv.DictReader((root / name).open(), delimiter="\t")) for name in files}


def test_two_processes_under_torchrun_train_the_pipeline_like_one(tmp_path_factory, tmp_path):
    """`-S train.nproc=2`: two gloo processes, the losses of one within rounding (dropout 0), one MLflow run a stage."""
    tmp_path = tmp_path / "repo"
    env = copy_repo(tiny_pipeline(tmp_path_factory), tmp_path)
    target = "finetune_pretrained@0-0"
    since = time.time() * 1000  # the runs of this test, not the copied store's
    curves = []
    for change in ("model.dropout=0.0", "train.nproc=2"):  # -S changes the workspace's params.yaml: both hold
        log = run(["dvc", "exp", "run", target, "-S", change], tmp_path, env)
        ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")}
        assert ran - {"validate"} == {"pretrain@0", target}
        curves.append(_curves(tmp_path))
    one, two = curves
    assert "2 processes under torchrun" in log
    assert log.count("pretrain@0: done in") == 1 and log.count(f"{target}: done in") == 1  # rank 0 alone reports
    for name, rows in one.items():
        assert len(two[name]) == len(rows), name
        for ours, theirs in zip(rows, two[name]):
            for key in (k for k in ours if k.endswith("loss")):
                assert float(theirs[key]) == pytest.approx(float(ours[key]), rel=1e-4), (name, key, ours)
    assert all((tmp_path / path).stat().st_size > 0 for path in ("models/pretrained/seed0.pt",
                                                                 "models/finetuned/pretrained/seed0-0.pt"))
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("lmtransfer")
    runs = client.search_runs([experiment.experiment_id], filter_string=(
        f"tags.`lmtransfer.kind` = 'stage' and attributes.start_time >= {since:.0f}"))
    ran = sorted((r.data.params["train.nproc"], r.info.run_name) for r in runs if r.info.run_name in (
        "pretrain@0", target))
    assert ran == [(nproc, name) for nproc in ("1", "2") for name in (target, "pretrain@0")]
    assert all(r.info.status == "FINISHED" for r in runs)
