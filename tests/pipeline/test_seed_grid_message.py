"""DVC lays out the seed grid before any stage runs: a seed list that is not a list is named by file, line and key."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DVC = str(Path(sys.executable).parent / "dvc")


def _repo(tmp_path: Path, task_dir: str) -> Path:
    """A git + DVC repository holding only the task's dvc.yaml and params.yaml: enough for DVC to read the grid."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([DVC, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / task_dir).mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(ROOT / task_dir / name, tmp_path / task_dir / name)
    return tmp_path


def _set(params: Path, section: str, value: str) -> int:
    """Writes `seeds: value` under `section:` of a params file; returns its 1-based line."""
    lines = params.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{section}:"))
    at = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("  seeds:"))
    lines[at] = f"  seeds: {value}\n"
    params.write_text("".join(lines), encoding="utf-8")
    return at + 1


@pytest.mark.parametrize(("task_dir", "section", "value"), [
    (".", "pretrain", "3"),
    (".", "finetune", "2.5"),
    (".", "finetune", "{a: 1}"),
    ("translation", "pretrain", "abc"),
])
@pytest.mark.slow
def test_a_seed_list_that_is_not_a_list_is_named_by_file_line_and_key(tmp_path, task_dir, section, value):
    repo = _repo(tmp_path, task_dir)
    params = repo / task_dir / "params.yaml"
    line = _set(params, section, value)
    shown = Path(task_dir, "params.yaml").as_posix().removeprefix("./")
    command = [DVC, "status"] + ([] if task_dir == "." else [f"{task_dir}/dvc.yaml"])
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=120)
    message = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"{shown}, line {line}: {section}.seeds must be a list" in message, message
    assert "unexpected error" not in message and "Traceback" not in message


@pytest.mark.slow
def test_a_seed_list_still_lays_out_the_grid(tmp_path):
    repo = _repo(tmp_path, ".")
    _set(repo / "params.yaml", "pretrain", "[4, 5]")
    done = subprocess.run([DVC, "stage", "list", "--name-only"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    stages = done.stdout.split()
    assert "pretrain@4" in stages and "pretrain@5" in stages and "pretrain@0" not in stages
    assert "finetune_pretrained@4-0" in stages


@pytest.mark.slow
@pytest.mark.parametrize("task_dir", [".", "translation"])
def test_a_missing_params_file_is_named_not_a_key_dvc_could_not_find(tmp_path, task_dir):
    """Without params.yaml DVC said only "Could not find 'pretrain.seeds'" (issue 71)."""
    repo = _repo(tmp_path, task_dir)
    (repo / task_dir / "params.yaml").unlink()
    shown = Path(task_dir, "params.yaml").as_posix().removeprefix("./")
    command = [DVC, "repro"] + ([] if task_dir == "." else [f"{task_dir}/dvc.yaml"])
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=120)
    message = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"{shown} is missing, and the pipeline reads its parameters there (pretrain.seeds among them)" in message
    assert "Could not find" not in message and "Traceback" not in message
