"""An input a parameter names is refused when a stage of the same pipeline writes it (it would never settle)."""

import os

import pytest

from lmtransfer.core.errors import ConfigError
from lmtransfer.harness.pipeline_outputs import refuse_pipeline_output, writing_stage

from pipeline_repo import REPO


@pytest.mark.parametrize("folder, path, found", [
    ("", "models/finetuned/pretrained/seed0-0.pt", ("finetune_pretrained", "")),  # a matrix output, any item
    ("", "models/pretrained/seed7.pt", ("pretrain", "")),
    ("", "data/tokenized/spm.model", ("tokenize", "data/tokenized")),  # inside a folder output
    ("", "metrics/headline.json", ("evaluate", "")),  # a declared metric
    ("", "checkpoints/start.pt", None),
    ("", "models/pretrained/seed0.pt.copy", None),  # a name that only begins like an output
    ("translation", "models/finetuned/scratch/seed1-0.pt", ("finetune_scratch", "")),
    ("translation", "../models/pretrained/seed0.pt", None),  # the classification pipeline's, not this one's
])
def test_the_stage_that_writes_a_path_is_found_relative_to_the_pipeline_folder(folder, path, found, monkeypatch):
    monkeypatch.chdir(REPO / folder)  # where DVC runs that pipeline's stages
    assert writing_stage(path) == found
    assert writing_stage(os.path.abspath(path)) == found  # the same file named from the repository root


def test_a_pipeline_output_is_refused_in_one_line_naming_the_key_and_the_stage(monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as refused:
        refuse_pipeline_output("models/finetuned/pretrained/seed0-0.pt", "pretrain.init_from")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("pretrain.init_from=models/finetuned/pretrained/seed0-0.pt: ")
    assert "stage 'finetune_pretrained'" in message and "never settle" in message
    refuse_pipeline_output("checkpoints/start.pt", "pretrain.init_from")  # not an output: passes


def test_without_a_pipeline_file_nothing_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert writing_stage("models/pretrained/seed0.pt") is None
