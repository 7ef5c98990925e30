"""The stage wrapper: one clear line for expected problems, named after the stage that ran."""

import os
import shutil
import subprocess
import sys

import pytest

import lmtransfer.core.errors as errors
from lmtransfer.classification.config import parse_classification_params
from lmtransfer.core.errors import ConfigError, DeviceError, LmtransferError, MissingOutputError
from lmtransfer.core.io import write_timings
from lmtransfer.harness.stage import stage_main
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.modeling.model import LanguageModel
from lmtransfer.training import finetune_start
from lmtransfer.training.stage_args import parse_finetune_args, parse_pretrain_args

from shipped import REPO, shipped_raw


def test_a_stage_named_by_its_arguments_says_which_one_finished(capsys):
    stage_main(lambda: "finetune_scratch@2")(lambda: None)()
    assert capsys.readouterr().out.startswith("finetune_scratch@2: done in ")


@pytest.mark.parametrize("error", [ConfigError("model.d_model: bad"), MissingOutputError("x: not found"),
                                   DeviceError("train.device='cuda' but no CUDA device is available"),
                                   KeyError("a bug, not a user problem")])
def test_expected_problems_are_one_line_and_exit_status_1_and_a_bug_keeps_its_traceback(capsys, monkeypatch, error):
    monkeypatch.delenv("LMTRANSFER_DEBUG", raising=False)

    @stage_main("pretrain")
    def main() -> None:
        raise error

    with pytest.raises(SystemExit if isinstance(error, LmtransferError) else KeyError) as raised:
        main()
    if isinstance(error, LmtransferError):
        assert raised.value.code == 1 and capsys.readouterr().err == f"pretrain: error: {error}\n"


def test_a_bad_environment_variable_stops_the_stage_in_one_line_before_its_work(capsys, monkeypatch):
    monkeypatch.setenv("LMTRANSFER_JOBS", "two")
    ran = []
    with pytest.raises(SystemExit) as stopped:
        stage_main("evaluate")(lambda: ran.append(True))()
    assert stopped.value.code == 1 and ran == []
    assert capsys.readouterr().err.startswith("evaluate: error: LMTRANSFER_JOBS='two': expected a whole number")


def test_every_expected_error_shares_one_base():
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert all(issubclass(c, LmtransferError) for c in classes)


def test_a_stage_run_in_a_copy_of_the_repository_imports_the_copys_code(tmp_path):
    """`dvc exp run --temp/--queue` runs the stages in a copy; the editable install points at the main checkout."""
    (tmp_path / "stages").mkdir()
    shutil.copy(REPO / "stages" / "_checkout.py", tmp_path / "stages")
    (tmp_path / "src" / "lmtransfer").mkdir(parents=True)
    (tmp_path / "src" / "lmtransfer" / "__init__.py").write_text("WHERE = 'the copy'\n")
    (tmp_path / "stages" / "probe.py").write_text("import _checkout\nimport lmtransfer\nprint(lmtransfer.WHERE)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "stages/probe.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "the copy", out.stderr


def test_the_stage_command_lines_name_their_stage_and_refuse_a_missing_argument(capsys):
    """The stage's name, which labels its log lines and its MLflow run, is the one dvc.yaml gives it."""
    scratch = parse_finetune_args(["--init", "scratch", "--pretrain-seed", "1", "--seed", "2"])
    assert scratch.stage == "finetune_scratch@1-2"
    assert parse_finetune_args(["--init", "pretrained", "--seed", "2"]).stage == "finetune_pretrained@2"  # translation
    pretrain = parse_pretrain_args(["--seed", "3"])
    assert pretrain.stage == "pretrain@3" and pretrain.outputs.checkpoint.name == "seed3.pt"
    for parse, argv, said in ((parse_finetune_args, ["--init", "warm", "--seed", "0"], "invalid choice: 'warm'"),
                              (parse_pretrain_args, [], "--seed")):
        with pytest.raises(SystemExit):
            parse(argv)
        assert said in capsys.readouterr().err


def test_each_run_of_the_grid_draws_from_its_own_seed_and_both_variants_of_a_run_from_the_same():
    draw = finetune_start.draw_seed
    draws = {(p, s): draw(s, p) for p in range(3) for s in range(3)}
    assert len(set(draws.values())) == 9 and draws == {(p, s): draw(s, p) for p in range(3) for s in range(3)}
    assert draw(4, None) == 4  # one pretraining run (translation): the seed itself


def test_a_fine_tune_starts_from_the_pretrained_checkpoint_or_the_network_params_describe(monkeypatch, tmp_path):
    """Scratch: `model.*` over the tokenizer's ids (a dependency); pretrained: the checkpoint's own network."""
    params = parse_classification_params(shipped_raw({"model": {"d_model": 16, "n_heads": 2, "n_layers": 1,
                                                                "d_ff": 8}}))
    scratch = parse_finetune_args(["--init", "scratch", "--pretrain-seed", "2", "--seed", "3"])
    start = finetune_start.language_model_start(params, {"vocab_size": 50, "pad_id": 1}, scratch)
    assert (start.stage, start.payload, start.upstream) == ("finetune_scratch@2-3", None, None)
    assert start.sections == ("model", "finetune", "train")
    assert (start.config.vocab_size, start.config.pad_id, start.config.d_model, start.config.n_layers) == (50, 1, 16, 1)

    pretrained = start.config.__class__(**{**start.config.to_dict(), "d_model": 8})
    monkeypatch.chdir(tmp_path)
    checkpoint = tmp_path / "models/pretrained/seed2.pt"
    save_checkpoint(checkpoint, LanguageModel(pretrained), "language_model", pretrained)
    monkeypatch.setattr(finetune_start, "run_that_wrote", lambda path: "run-of-" + path.name)
    pretrained_args = parse_finetune_args(["--init", "pretrained", "--pretrain-seed", "2", "--seed", "0"])
    start = finetune_start.language_model_start(params, {"vocab_size": 50, "pad_id": 1}, pretrained_args)
    assert start.stage == "finetune_pretrained@2-0" and start.upstream == "run-of-seed2.pt"
    assert start.pretrained.resolve() == checkpoint
    assert start.sections == ("finetune", "train") and start.config.d_model == 8 and start.payload["state_dict"]


def test_ctrl_c_ends_a_stage_in_one_line():
    code = ("import os, signal, time\nfrom lmtransfer.harness.stage import stage_main\n@stage_main('pretrain')\n"
            "def main():\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(5)\n"
            "    raise AssertionError('went on')\nmain()\n")
    stopped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 130
    assert stopped.stderr.strip().splitlines() == ["pretrain: stopped; what earlier stages wrote is kept"]


def test_a_timing_that_cannot_be_written_costs_a_line_not_the_stage(tmp_path, capsys):
    (tmp_path / "timings").write_text("a file where the folder should be")
    write_timings(tmp_path / "timings" / "tokenize.json", {"seconds": 1.0})
    assert capsys.readouterr().err.startswith(f"could not write {tmp_path / 'timings' / 'tokenize.json'} (")
