"""benchmarks/fault_battery.py's bookkeeping: how an outcome is sorted; each edit finds its line of params.yaml."""

import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from pipeline_repo import TINY_PARAMS, ChattrMissing, make_repo, merge, write_tiny_data

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def battery(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import fault_battery

    return fault_battery


def _done(code: int, output: str) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], code, stdout="", stderr=output)


def _each_changes_a_line_and_undoes_it(cases, root: Path, params: Path) -> None:
    original = params.read_text()
    for case in cases:
        try:
            undo = case.apply(root)
        except ChattrMissing:  # no immutable files on this machine: the battery says so too
            continue
        assert params.read_text() != original, case.name
        undo()
        assert params.read_text() == original, case.name


def test_an_outcome_is_sorted_by_what_the_user_saw_and_what_was_left(battery):
    case = battery.Case("params", "x", ["dvc", "repro"], ("model.d_model",))
    assert battery.outcome(case, _done(1, "validate: error: model.d_model: must be > 0"), []) == "ok"
    assert battery.outcome(case, _done(1, "validate: error: something is wrong"), []) == "misleading"
    assert battery.outcome(case, _done(0, "model.d_model ..."), []) == "silent"
    assert battery.outcome(case, _done(1, "Traceback (most recent call last):\n model.d_model"), []) == "traceback"
    assert battery.outcome(case, _done(255, "ERROR: unexpected error - 'Value' object is not iterable"),
                           []) == "traceback"
    assert battery.outcome(case, _done(1, "model.d_model"), ["metrics/evaluate.json"]) == "lost"
    runs = battery.Case("runs", "y", ["dvc", "repro"], ())
    assert battery.outcome(runs, _done(0, ""), ["metrics/evaluate.json"]) == "ok"  # a run may change outputs
    assert battery.outcome(runs, _done(1, "stopped"), []) == "misleading"
    noted = battery.Case("artifacts", "z", ["dvc", "repro"], ("copied",), runs=True)  # must run, and say so
    assert battery.outcome(noted, _done(0, "tracking: ... copied ..."), []) == "ok"
    assert battery.outcome(noted, _done(0, "nothing said"), []) == "silent"
    assert battery.outcome(noted, _done(1, "copied"), []) == "misleading"


def test_every_translation_case_changes_one_line_of_the_translation_params(battery, tmp_path):
    params = tmp_path / "translation" / "params.yaml"
    params.parent.mkdir()
    sys.path.insert(0, str(REPO / "tests" / "pipeline"))
    from test_pipeline_translation import TINY_TRANSLATION

    YAML().dump(merge(YAML().load((REPO / "translation/params.yaml").read_text()), TINY_TRANSLATION), params)
    translation = [case for case in battery.cases() if case.pipeline == "translation"]
    assert translation and all(case.command[-1] == "translation/dvc.yaml" for case in translation)
    _each_changes_a_line_and_undoes_it(translation, tmp_path, params)


def test_the_line_shown_is_ours_not_dvcs_summary_and_names_no_temporary_folder(battery, tmp_path):
    output = (f"Running stage 'validate':\nvalidate: error: {tmp_path}/mlflow.db: damaged\n"
              "ERROR: failed to reproduce 'validate': failed to run: python stages/validate.py, exited with 1\n")
    assert battery.telling_line(output, tmp_path) == "validate: error: ./mlflow.db: damaged"
    assert battery.telling_line("a\nlast line\n", tmp_path) == "last line"
    assert (battery.telling_line("validate: error: params.yaml: invalid parameters:\n  model.d_model: > 0\n", tmp_path)
            == "validate: error: params.yaml: invalid parameters: model.d_model: > 0")


def test_every_params_case_changes_one_line_of_the_tiny_pipeline(battery, tmp_path):
    make_repo(tmp_path, TINY_PARAMS, write_tiny_data)
    store = tmp_path / "mlflow.db"
    store.write_bytes(bytes(range(256)) * 800)  # what the store faults damage
    edits = [case for case in battery.cases()
             if case.group in ("params", "data files", "store") or case.name.startswith("LMTRANSFER_CACHE_DIR")]
    _each_changes_a_line_and_undoes_it(edits, tmp_path, tmp_path / "params.yaml")
    assert not (tmp_path / "mlflow.db.kept").exists() and store.read_bytes() == bytes(range(256)) * 800
