"""The experiments DVC knows (the workspace, its commit, each `dvc exp run` from it) with their params and reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmtransfer.core.errors import LmtransferError
from lmtransfer.core.paths import EVALUATE_REPORT, PARAMS
from lmtransfer.harness.tracking import flatten


@dataclass
class Experiment:
    name: str  # "workspace", the commit's branch or short rev, or the experiment's name
    rev: str
    params: dict[str, Any]  # params.yaml, flat: {"finetune.lr": 0.0005, ...}
    report: dict | None  # metrics/evaluate.json at that revision; None when it has none (queued, failed)


def dvc_env() -> dict[str, str]:
    """dvc as the stages run it: this interpreter's folder first on PATH."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def dvc_output(root: Path, *args: str) -> str:
    done = subprocess.run(["dvc", *args], cwd=root, env=dvc_env(), text=True, capture_output=True)
    if done.returncode:
        raise LmtransferError(f"`dvc {' '.join(args)}` failed in {root}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def _params_of(entry: dict) -> dict[str, Any]:
    files = (entry.get("data") or {}).get("params") or {}
    return flatten((files.get(str(PARAMS)) or {}).get("data") or {})


def _report_at(root: Path, rev: str) -> dict | None:
    if rev == "workspace":
        path = root / EVALUATE_REPORT
        return json.loads(path.read_text()) if path.is_file() else None
    import dvc.api

    try:
        return json.loads(dvc.api.read(str(EVALUATE_REPORT), repo=str(root), rev=rev))
    except Exception:  # noqa: BLE001 - an experiment without the file (failed before evaluate) has no report
        return None


def _entries(shown: list[dict]):
    """(name, rev, entry) of each baseline and each finished experiment of `dvc exp show --json`."""
    for baseline in shown:
        rev = baseline["rev"]
        yield (baseline.get("name") or (rev if rev == "workspace" else rev[:7])), rev, baseline
        for experiment in baseline.get("experiments") or []:
            executor = experiment.get("executor") or {}
            if executor.get("state", "success") != "success":  # queued, running or failed: no results of its own
                continue
            for run in experiment.get("revs") or []:
                yield (run.get("name") or experiment.get("name") or run["rev"][:7]), run["rev"], run


def list_experiments(root: Path = Path("."), prefix: str = "", rev: str | None = None) -> list[Experiment]:
    """Every experiment of the current commit (or `rev`) named `prefix`*, the workspace first unless it holds nothing
    new."""
    shown = json.loads(dvc_output(root, "exp", "show", "--json", *(["--rev", rev] if rev else [])))
    found = [Experiment(name, rev, _params_of(entry), _report_at(root, rev)) for name, rev, entry in _entries(shown)]
    if len(found) > 1 and found[0].rev == "workspace" and (found[0].params, found[0].report) == (
            found[1].params, found[1].report):
        found = found[1:]
    return [e for e in found if e.name.startswith(prefix)] if prefix else found


def changed_params(experiments: list[Experiment]) -> list[str]:
    keys: list[str] = []
    for experiment in experiments:
        keys += [key for key in experiment.params if key not in keys]
    return [key for key in keys if len({json.dumps(e.params.get(key)) for e in experiments}) > 1]
