"""The recipe search's bookkeeping: a change read as `dvc exp run -S` does, the candidates' table and its machine."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = [{"pretrained": [0.70, 0.74], "scratch": [0.60, 0.72], "val_perplexity": 80.0, "pretrain_seconds": 10.0,
         "pretrained_seconds": 3.0, "scratch_seconds": 3.0},
        {"pretrained": [0.72, 0.76], "scratch": [0.64, 0.74], "val_perplexity": 90.0, "pretrain_seconds": 12.0}]


@pytest.fixture
def recipe_search(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.setattr(sys, "argv", ["recipe_search.py"])
    import recipe_search

    import results_file

    monkeypatch.setattr(results_file, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(results_file, "REPO", tmp_path)
    return recipe_search


def test_a_change_is_read_as_yaml_and_an_unknown_key_is_refused(recipe_search):
    raw = {"model": {"n_layers": 4, "embedding_init": "normal"}, "pretrain": {"seeds": [0]}}
    recipe_search.apply_change(raw, "model.n_layers=2")
    recipe_search.apply_change(raw, "model.embedding_init=uniform")
    recipe_search.apply_change(raw, "pretrain.seeds=[0, 1]")
    assert raw == {"model": {"n_layers": 2, "embedding_init": "uniform"}, "pretrain": {"seeds": [0, 1]}}
    with pytest.raises(SystemExit, match="model.n_layer is not a key of params.yaml"):
        recipe_search.apply_change(raw, "model.n_layer=2")


def test_the_summary_is_the_mean_over_pretraining_runs_with_head_start_and_gap(recipe_search):
    summary = recipe_search.summarize(RUNS, ["pretrained", "scratch"], test=False)
    assert summary["pretrained"] == [0.71, 0.75] and summary["scratch"] == [0.62, 0.73]
    assert (summary["head_start"], summary["gap_last"]) == (0.09, 0.02)
    assert (summary["val_perplexity"], summary["pretrain_seconds"]) == (85.0, 11.0)


def test_the_table_names_each_candidates_changes_and_the_machine_that_measured_them(recipe_search, tmp_path):
    runs = RUNS[:1]
    gpu = {"cpu": "some CPU", "cores": 16, "gpu": "some GPU"}
    table = {name: {"summary": recipe_search.summarize(runs, ["pretrained", "scratch"], False), "runs": runs,
                    "changes": changes, "machine": gpu, "commit": "abc1234",
                    "command": f"python benchmarks/recipe_search.py --fp32 --name {name} "
                               + " ".join(f"--set {change}" for change in changes)}
             for name, changes in (("as-is", []), ("uniform", ["model.embedding_init=uniform"]))}
    (tmp_path / "runs.json").write_text(json.dumps(table))
    recipe_search.write_table(tmp_path / "runs.json", "search-demo", "a note")
    written = json.loads((tmp_path / "results" / "search-demo.json").read_text())
    assert written["machine"] == gpu and written["code"] == "abc1234"
    assert written["command"].startswith("python benchmarks/recipe_search.py --fp32 --name NAME")
    assert written["rows"][0][:4] == ["as-is", "none (params.yaml at abc1234)", "0.700 / 0.740", "0.600 / 0.720"]
    assert written["rows"][1][1] == "model.embedding_init=uniform"
    assert written["rows"][1][4:] == [0.1, 0.02, 80.0, 10.0, "0.740 / 0.720"]  # the best epochs: the pipeline keeps


def test_the_pipeline_timer_reads_each_stages_own_line_from_a_printout(recipe_search):
    import pipeline_stages

    lines = ["Running stage 'translation/dvc.yaml:prepare':", "prepare: done in 10.7 s", "noise: done in soon",
             "  finetune_scratch@1-0: done in 153.1 s  "]
    assert pipeline_stages.stage_times(lines) == {"prepare": 10.7, "finetune_scratch@1-0": 153.1}
