"""The masked-LM objective, end to end: one experiment flag on a copy of the tiny pipeline's causal run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline_repo import copy_repo, run, tiny_pipeline

pytestmark = pytest.mark.slow


def test_masked_lm_pretraining_runs_end_to_end_with_one_experiment_flag(tmp_path_factory, tmp_path):
    """`-S pretrain.objective=mlm` (+ NSP): what it reaches reruns, bidirectional models, `lmtransfer fill`."""
    tmp_path = tmp_path / "repo"
    env = copy_repo(tiny_pipeline(tmp_path_factory), tmp_path)
    log = run(["dvc", "exp", "run", "-S", "pretrain.objective=mlm", "-S", "pretrain.nsp=true", "-S",
               "pretrain.seeds=[0]"], tmp_path, env)
    ran = {line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage")} - {"validate"}
    assert ran == {"pretrain@0", "finetune_pretrained@0-0", "finetune_scratch@0-0", "evaluate", "plot"}
    summary = json.loads((tmp_path / "metrics/pretrain/seed0.json").read_text())
    assert summary["objective"] == "mlm" and summary["next_sentence"] is True
    assert 0 <= summary["val_masked_accuracy"] <= 1 and 0 <= summary["val_nsp_accuracy"] <= 1
    samples = (tmp_path / "metrics/pretrain/seed0/samples.txt").read_text()
    assert samples.startswith("[fill] the film <mask> -> ") and samples.count(" | ") == 4
    valid_log = (tmp_path / "metrics/pretrain/seed0/valid.tsv").read_text().splitlines()
    assert valid_log[0].split("\t") == ["step", "val_loss", "val_perplexity", "val_masked_accuracy", "val_nsp_loss",
                                        "val_nsp_accuracy", "phase"]
    assert json.loads((tmp_path / "metrics/evaluate.json").read_text())["n_seeds"] == 1
    assert all((tmp_path / "plots" / name).stat().st_size > 0 for name in ("finetune_accuracy.png", "pretrain.png"))
    code = ("import sys, torch; from lmtransfer.modeling.checkpoint import read_torch_file; "
            "print([read_torch_file(p)['model_config']['causal'] for p in sys.argv[1:]])")
    checkpoints = ["models/pretrained/seed0.pt", "models/finetuned/pretrained/seed0-0.pt",
                   "models/finetuned/scratch/seed0-0.pt"]
    assert run([sys.executable, "-c", code, *checkpoints], tmp_path, env).strip() == "[False, False, False]"
    filled = run(["lmtransfer", "fill", "the <mask> was great", "--top-k", "3"], tmp_path, env)
    assert filled.splitlines()[0] == "the <mask> was great" and len(filled.splitlines()) == 4
    refused = subprocess.run(["lmtransfer", "generate", "the film"], cwd=tmp_path, env=env, capture_output=True,
                             text=True)
    assert refused.returncode != 0 and "cannot continue a text left to right" in refused.stderr
