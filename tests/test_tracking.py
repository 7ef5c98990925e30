"""MLflow tracking helpers that need no pipeline run."""

from __future__ import annotations

from lmtransfer.tracking import UI_WORKFLOW, ui_link


def test_the_ui_link_opens_the_experiment_on_its_runs_table(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("LMTRANSFER_EXPERIMENT", raising=False)
    assert ui_link("http://h:1", tmp_path) == f"http://h:1/#/experiments?{UI_WORKFLOW}"
    assert not (tmp_path / "mlflow.db").exists()  # asking for the link never creates a store

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client.create_experiment("other")
    experiment_id = client.create_experiment("lmtransfer")
    assert ui_link("http://h:1", tmp_path) == f"http://h:1/#/experiments/{experiment_id}?workflowType=machine_learning"
