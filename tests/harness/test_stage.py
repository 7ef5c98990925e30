"""The stage wrapper: one clear line for expected problems, named after the stage that ran."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from lmtransfer.core.errors import ConfigError, DeviceError, LmtransferError, MissingOutputError
from lmtransfer.harness.stage import stage_main


def test_a_stage_named_by_its_arguments_says_which_one_finished(capsys):
    @stage_main(lambda: "finetune_scratch@2")
    def main() -> None:
        pass

    main()
    assert capsys.readouterr().out.startswith("finetune_scratch@2: done in ")


def test_a_stage_whose_training_was_handed_over_counts_its_time_from_the_first_process(capsys, monkeypatch):
    import json
    import time

    from lmtransfer.core import sharing

    monkeypatch.setenv(sharing.HANDOVER_ENV, json.dumps({"wait": "sleep", "saw": "", "count": 1, "run_id": None,
                                                         "started": time.time() - 100}))

    @stage_main("pretrain@0")
    def main() -> None:
        pass

    main()
    seconds = float(capsys.readouterr().out.split("done in ")[1].split()[0])
    assert 100 <= seconds < 110


@pytest.mark.parametrize("error", [ConfigError("model.d_model: bad"), MissingOutputError("x: not found"),
                                   DeviceError("train.device='cuda' but no CUDA device is available")])
def test_expected_problems_are_one_line_and_exit_status_1(capsys, monkeypatch, error):
    monkeypatch.delenv("LMTRANSFER_DEBUG", raising=False)

    @stage_main("pretrain")
    def main() -> None:
        raise error

    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == f"pretrain: error: {error}\n"


def test_a_bad_environment_variable_stops_the_stage_in_one_line_before_its_work(capsys, monkeypatch):
    monkeypatch.setenv("LMTRANSFER_WATCH", "2")
    ran = []

    @stage_main("evaluate")
    def main() -> None:
        ran.append(True)

    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 1 and ran == []
    assert capsys.readouterr().err == ("evaluate: error: LMTRANSFER_WATCH='2': expected 0 or 1; unset, it is 1 inside a "
                                       "pipeline stage, 0 outside\n")


def test_a_bug_keeps_its_traceback():
    @stage_main("plot")
    def main() -> None:
        raise KeyError("a bug, not a user problem")

    with pytest.raises(KeyError):
        main()


FULL_STORE = """
import resource
from pathlib import Path
from lmtransfer.harness.stage import stage_main
from lmtransfer.harness.tracking_store import ensure_store, quiet_mlflow_logs

@stage_main("pretrain")
def main():
    quiet_mlflow_logs()  # as a stage's MLflow run does
    store = ensure_store(Path("mlflow.db"))
    resource.setrlimit(resource.RLIMIT_FSIZE, (store.stat().st_size + 4096, resource.RLIM_INFINITY))
    from mlflow import MlflowClient
    client = MlflowClient(tracking_uri="sqlite:///mlflow.db")
    experiment = client.create_experiment("e")
    for _ in range(100):
        client.log_param(client.create_run(experiment).info.run_id, "p", "v" * 5000)

main()
"""


@pytest.mark.slow
def test_a_tracking_store_that_cannot_grow_is_one_line_naming_it(tmp_path):
    """Under a file-size limit, MLflow's SQLite store fails with `disk I/O error` under three chained tracebacks."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("LMTRANSFER_DEBUG", "MLFLOW_TRACKING_URI")}
    env["DVC_ROOT"] = str(tmp_path)  # the store the message names: this folder's mlflow.db
    out = subprocess.run([sys.executable, "-c", FULL_STORE], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    (line,) = [line for line in out.stderr.splitlines() if line.strip()]
    assert line.startswith(f"pretrain: error: could not write the MLflow store sqlite:///{tmp_path / 'mlflow.db'} "
                           "(disk I/O error): the disk is full, a file-size limit is reached, or the disk failed")


def test_a_full_disk_names_the_file_it_could_not_write(capsys, monkeypatch):
    import errno

    monkeypatch.delenv("LMTRANSFER_DEBUG", raising=False)

    @stage_main("tokenize")
    def main() -> None:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "data/tokenized/train.bin")
        except OSError as error:
            raise RuntimeError("writing the ids failed") from error

    with pytest.raises(SystemExit):
        main()
    assert capsys.readouterr().err == ("tokenize: error: could not write data/tokenized/train.bin: the disk is full; "
                                       "free some space and run it again (what earlier stages wrote is kept)\n")


def test_every_expected_error_shares_one_base():
    import lmtransfer.core.errors as errors

    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert all(issubclass(c, LmtransferError) for c in classes)


def test_a_stage_run_in_a_copy_of_the_repository_imports_the_copys_code(tmp_path):
    """`dvc exp run --temp/--queue` runs the stages in a copy; the editable install points at the main checkout."""
    import shutil
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "stages").mkdir()
    shutil.copy(repo / "stages" / "_checkout.py", tmp_path / "stages")
    (tmp_path / "src" / "lmtransfer").mkdir(parents=True)
    (tmp_path / "src" / "lmtransfer" / "__init__.py").write_text("WHERE = 'the copy'\n")
    (tmp_path / "stages" / "probe.py").write_text("import _checkout\nimport lmtransfer\nprint(lmtransfer.WHERE)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "stages/probe.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "the copy", out.stderr
    for script in sorted((repo / "stages").glob("*.py")):
        if script.name != "_checkout.py":
            text = script.read_text()
            assert "import _checkout" in text and text.index("import _checkout") < text.find("from lmtransfer"), (
                script.name)


def test_the_stage_command_lines_name_their_stage_and_refuse_a_missing_argument(capsys):
    """The pretrain and fine-tune scripts parse their arguments themselves (training.stage_args); the
    stage's name, which labels its log lines and its MLflow run, is the one dvc.yaml gives it."""
    from lmtransfer.training.stage_args import parse_finetune_args, parse_pretrain_args

    assert parse_finetune_args(["--init", "scratch", "--pretrain-seed", "1", "--seed", "2"]).stage == "finetune_scratch@1-2"
    assert parse_finetune_args(["--init", "pretrained", "--seed", "2"]).stage == "finetune_pretrained@2"  # translation's
    pretrain = parse_pretrain_args(["--seed", "3"])
    assert pretrain.stage == "pretrain@3" and pretrain.outputs.checkpoint.name == "seed3.pt"
    with pytest.raises(SystemExit):
        parse_finetune_args(["--init", "warm", "--seed", "0"])
    assert "invalid choice: 'warm'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_pretrain_args([])
    assert "--seed" in capsys.readouterr().err


def test_each_run_of_the_grid_draws_from_its_own_seed_and_both_variants_of_a_run_from_the_same():
    from lmtransfer.training.finetune_start import draw_seed

    draws = {(p, s): draw_seed(s, p) for p in range(3) for s in range(3)}
    assert len(set(draws.values())) == 9 and draws == {(p, s): draw_seed(s, p) for p in range(3) for s in range(3)}
    assert draw_seed(4, None) == 4  # one pretraining run (translation): the seed itself


def test_a_fine_tune_starts_from_the_pretrained_checkpoint_or_the_network_params_describe(monkeypatch, tmp_path):
    """Scratch: `model.*` over the tokenizer's ids, which its result then depends on; pretrained: the checkpoint's
    own network (its `model.*` is in the checkpoint, so the params' are not a dependency)."""
    from lmtransfer.classification.config import parse_classification_params
    from lmtransfer.modeling.checkpoint import save_checkpoint
    from lmtransfer.modeling.model import LanguageModel
    from lmtransfer.training import finetune_start as module
    from lmtransfer.training.stage_args import parse_finetune_args

    params = parse_classification_params({"model": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 8}})
    scratch = parse_finetune_args(["--init", "scratch", "--pretrain-seed", "2", "--seed", "3"])
    start = module.language_model_start(params, {"vocab_size": 50, "pad_id": 1}, scratch)
    assert (start.stage, start.payload, start.upstream) == ("finetune_scratch@2-3", None, None)
    assert start.sections == ("model", "finetune", "train")
    assert (start.config.vocab_size, start.config.pad_id, start.config.d_model, start.config.n_layers) == (50, 1, 16, 1)

    pretrained = start.config.__class__(**{**start.config.to_dict(), "d_model": 8})
    monkeypatch.chdir(tmp_path)
    checkpoint = tmp_path / "models/pretrained/seed2.pt"
    save_checkpoint(checkpoint, LanguageModel(pretrained), "language_model", pretrained)
    monkeypatch.setattr(module, "run_that_wrote", lambda path: "run-of-" + path.name)
    pretrained_args = parse_finetune_args(["--init", "pretrained", "--pretrain-seed", "2", "--seed", "0"])
    start = module.language_model_start(params, {"vocab_size": 50, "pad_id": 1}, pretrained_args)
    assert start.stage == "finetune_pretrained@2-0" and start.upstream == "run-of-seed2.pt"
    assert start.pretrained.resolve() == checkpoint
    assert start.sections == ("finetune", "train") and start.config.d_model == 8 and start.payload["state_dict"]


# --- stops and faults that must end in one line ----------------------------------------------------------------


def _stage_script(body: str) -> str:
    return ("import os, signal, sys, time\nfrom lmtransfer.harness.stage import stage_main\n"
            f"@stage_main('pretrain')\ndef main():\n{body}\nmain()\n")


def test_ctrl_c_ends_a_stage_like_sigterm_in_one_line():
    import subprocess

    code = _stage_script("    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(5)\n    raise AssertionError('went on')")
    stopped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 130
    assert stopped.stderr.strip().splitlines() == ["pretrain: stopped (SIGINT); what earlier stages wrote is kept"]


@pytest.mark.slow
def test_a_stage_whose_dvc_is_gone_stops_instead_of_training_on_as_an_orphan(tmp_path):
    """SIGTERM to the `dvc` process alone: the stage it started notices and stops like SIGTERM."""
    import signal
    import subprocess
    import time

    import psutil

    stage = tmp_path / "stage.py"
    stage.write_text(_stage_script("    open('started', 'w').close()\n    time.sleep(60)\n"
                                   "    raise AssertionError('trained on')"))
    dvc = tmp_path / "dvc"  # what the watch looks for: a parent process named dvc
    dvc.write_text(f"#!/bin/bash\n{sys.executable} {stage} 2> stage.err &\necho $! > stage.pid\nwait\n")
    dvc.chmod(0o755)
    launcher = subprocess.Popen([str(dvc)], cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child = psutil.Process(int((tmp_path / "stage.pid").read_text()))
    launcher.send_signal(signal.SIGTERM)
    launcher.wait(timeout=10)
    child.wait(timeout=30)  # not its child: no exit status to read, but it ended long before its 60 s sleep
    assert (tmp_path / "stage.err").read_text().strip().splitlines()[-1] == (
        "pretrain: stopped (the dvc process that started it ended); what earlier stages wrote is kept")


def test_a_training_handed_over_after_its_dvc_ended_stops_at_once(tmp_path):
    """The dvc may end between the watch's last look and a handover's exec: the process the training is handed
    over to finds no dvc above it, though the one before ran under one, and stops instead of training on."""
    import json
    import subprocess

    stage = tmp_path / "stage.py"
    stage.write_text(_stage_script("    raise AssertionError('trained on')"))
    handover = {"wait": "sleep", "saw": "other programs", "count": 1, "launcher": 4_000_000}
    env = {**os.environ, "LMTRANSFER_HANDOVER": json.dumps(handover)}
    result = subprocess.run([sys.executable, str(stage)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 128 + 15 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "pretrain: stopped (the dvc process that started it ended); what earlier stages wrote is kept")
    handover["launcher"] = None  # run by hand, not under dvc: it goes on as before
    env = {**os.environ, "LMTRANSFER_HANDOVER": json.dumps(handover)}
    result = subprocess.run([sys.executable, str(stage)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    assert "trained on" in result.stderr


def test_a_timing_that_cannot_be_written_costs_a_line_not_the_stage(tmp_path, capsys):
    from lmtransfer.core.io import write_timings

    (tmp_path / "timings").write_text("a file where the folder should be")
    write_timings(tmp_path / "timings" / "tokenize.json", {"seconds": 1.0})
    assert capsys.readouterr().err.startswith(f"could not write {tmp_path / 'timings' / 'tokenize.json'} (")


def test_a_write_that_finds_the_disk_full_names_the_file_it_was_writing(tmp_path):
    import errno

    from lmtransfer.core.io import atomic_path
    from lmtransfer.harness.stage import _no_room_to_write

    target = tmp_path / "models" / "pretrained.pt"
    with pytest.raises(OSError) as error:
        with atomic_path(target):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert error.value.filename == str(target)
    assert _no_room_to_write(error.value) == f"could not write {target}: the disk is full"
    assert not any(target.parent.iterdir())


def test_bookkeeping_that_fails_while_a_stage_stops_is_one_line(capsys):
    import sqlite3

    from lmtransfer.harness.tracking import _stop_behind, _while_stopping

    def locked() -> None:
        raise sqlite3.OperationalError("database is locked")

    _while_stopping(locked)
    assert capsys.readouterr().err == ("tracking: the stopped stage's run could not be marked KILLED (database is "
                                       "locked); the next stage marks it\n")
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            locked()
    except sqlite3.OperationalError as error:
        assert isinstance(_stop_behind(error), KeyboardInterrupt)
    assert _stop_behind(sqlite3.OperationalError("no stop")) is None


ENDS = """
import atexit, sys
from lmtransfer.core.errors import ConfigError
from lmtransfer.harness.stage import stage_main

class Torn:  # says so when Python's teardown frees it
    def __del__(self):
        print("torn down", flush=True)

kept = Torn()
atexit.register(lambda: print("exit handler ran"))

@stage_main("prepare")
def main():
    print("working")  # not flushed: a pipe's buffer
    if sys.argv[1] == "fails":
        raise ConfigError("data.train: no such file")

main()
"""


@pytest.mark.parametrize("outcome", ["works", "fails"])
def test_a_stage_run_as_a_program_ends_without_python_s_teardown_and_loses_no_line(tmp_path, outcome):
    """Python's teardown frees every module torch and MLflow loaded, which took longer than a tiny stage's work."""
    import subprocess

    script = tmp_path / "stage.py"
    script.write_text(ENDS)
    env = {k: v for k, v in os.environ.items() if k != "LMTRANSFER_DEBUG"}
    done = subprocess.run([sys.executable, str(script), outcome], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.splitlines()[:1] == ["working"] and done.stdout.splitlines()[-1] == "exit handler ran"
    assert "torn down" not in done.stdout
    if outcome == "works":
        assert done.returncode == 0 and "prepare: done in" in done.stdout and done.stderr == ""
    else:
        assert done.returncode == 1 and done.stderr == "prepare: error: data.train: no such file\n"
