"""Shared by the end-to-end tests: a throwaway git + DVC copy of this repository with tiny params."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[1]


def merge(base: dict, override: dict) -> dict:
    for key, value in override.items():
        if isinstance(value, dict):
            merge(base.setdefault(key, {}), value)
        else:
            base[key] = value
    return base


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def make_repo(root: Path, params: dict, write_data: Callable[[Path], None]) -> dict[str, str]:
    """Copy the pipeline into `root`, apply `params` over params.yaml, add the data, commit; returns the env."""
    for name in ("dvc.yaml", ".dvcignore", "params.yaml"):
        shutil.copy(REPO / name, root / name)
    for name in ("stages", "src", ".dvc"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("tmp", "cache", "__pycache__"))
    yaml = YAML()
    merged = merge(yaml.load((root / "params.yaml").read_text()), params)
    with open(root / "params.yaml", "w") as handle:
        yaml.dump(merged, handle)
    write_data(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "LMTRANSFER_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(root / "src")  # the copy's code, not the installed checkout's
    env.update(DVC_NO_ANALYTICS="1")
    run(["git", "init", "-q"], root, env)
    run(["git", "config", "user.name", "lmtransfer tests"], root, env)  # a clean CI machine has no identity
    run(["git", "config", "user.email", "tests@lmtransfer.invalid"], root, env)
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-qm", "tiny pipeline"], root, env)
    return env
