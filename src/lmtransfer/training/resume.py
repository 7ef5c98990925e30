"""Resume snapshots: `dvc repro` after a kill continues training where it stopped, with the same result.

DVC deletes a stage's outputs before running it, so snapshots live apart, in `.resume/<stage>/<phase>.pt`: the
weights, optimizer, scheduler, every random generator, the position in the data and the results so far. Only a run
with the same fingerprint (stage, params, input and code bytes, torch, device, threads) resumes; else it is deleted.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmtransfer.core.errors import CheckpointError
from lmtransfer.core.io import atomic_path, sha256_of
from lmtransfer.core.paths import stage_file_name
from lmtransfer.modeling.checkpoint import read_torch_file
from lmtransfer.modeling.runtime import environment_facts
from lmtransfer.training import distributed

RESUME_DIR = Path(".resume")
CHECKOUT = Path(__file__).resolve().parents[3]  # from this file: the translation and course stages run elsewhere


def _files(path: Path, pattern: str) -> list[Path]:
    return [path] if path.is_file() else [p for p in path.rglob(pattern) if p.is_file()]


def code_files() -> dict[str, Path]:
    """Every Python file of the checkout's package and stage scripts, by its path in the checkout."""
    folders = (CHECKOUT / "src" / "lmtransfer", CHECKOUT / "stages")
    return {str(p.relative_to(CHECKOUT)): p for folder in folders for p in sorted(_files(folder, "*.py"))}


def fingerprint(stage: str, params: dict[str, dict[str, Any]], inputs: Iterable[Path], device: torch.device) -> str:
    """What a snapshot must match to be resumed from; `params` by section, `train.resume_every` left out."""
    params = {section: {k: v for k, v in keys.items() if k != "resume_every"} for section, keys in params.items()}
    files = {str(p): p for p in sorted({p for path in inputs for p in _files(path, "*")})} | code_files()
    facts = {"stage": stage, "params": params, "torch": torch.__version__, "device": str(device),
             **environment_facts(), "files": {name: sha256_of(path) for name, path in files.items()}}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


class Snapshots:
    """The resume snapshots of one stage run; `every` = training steps between snapshots (0 = none)."""

    def __init__(self, stage: str, fingerprint: str, every: int, root: Path = RESUME_DIR):
        self.directory = root / stage_file_name(stage)  # `finetune_scratch@2` -> `finetune_scratch_seed2`
        if every > 0 and distributed.world().size > 1:
            print(f"resume: no snapshots with {distributed.world().size} processes (train.nproc > 1): a killed run "
                  "starts over")
            every = 0
        self.fingerprint, self.every = fingerprint, every

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def save(self, phase: str, model, optimizer, scheduler, **position: Any) -> None:
        """The training as it is now, and `position` (where the data is and the results so far)."""
        if self.every <= 0:
            return
        name, keys, *rest = np.random.get_state()  # the array as a list: a weights-only load reads no numpy
        rng = {"torch": torch.get_rng_state(), "numpy": (name, keys.tolist(), *rest), "python": random.getstate()}
        if torch.cuda.is_initialized():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        buffer = io.BytesIO()
        torch.save({"fingerprint": self.fingerprint, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "rng": rng, "position": position}, buffer)
        with atomic_path(self.directory / f"{phase}.pt") as tmp:  # a kill mid-write keeps the previous snapshot
            tmp.write_bytes(buffer.getvalue())

    def load(self, phase: str, model, optimizer, scheduler) -> dict[str, Any] | None:
        """The phase's snapshot put back, returning its `position`; None if none, or another run's (then deleted)."""
        path = self.directory / f"{phase}.pt"
        if self.every <= 0 or not path.is_file():
            return None
        try:
            state = read_torch_file(path)
        except CheckpointError:  # a disk fault, a truncated write: start over rather than stop
            state, problem = None, "is unreadable (truncated or damaged)"
        else:
            problem = "belongs to another configuration (params, inputs or code changed)"
        if not isinstance(state, dict) or state.get("fingerprint") != self.fingerprint:
            print(f"resume: {path} {problem}; starting over")
            self.clear()
            return None
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        rng = state["rng"]
        torch.set_rng_state(rng["torch"])
        name, keys, *rest = rng["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), *rest))
        random.setstate(rng["python"])
        if "cuda" in rng:
            torch.cuda.set_rng_state_all(rng["cuda"])
        return state["position"]

    def clear(self) -> None:  # the stage has written its outputs
        shutil.rmtree(self.directory, ignore_errors=True)


def clear_finished_snapshots(running: set[str], root: Path = RESUME_DIR) -> list[str]:
    """Removes the snapshots of every stage not running now (evaluate: the training stages are done, perhaps by a
    run-cache restore that ran none of our code). Returns the stages cleared."""
    if not root.is_dir():
        return []
    keep = {stage_file_name(stage) for stage in running}
    cleared = sorted(path.name for path in root.iterdir() if path.is_dir() and path.name not in keep)
    for name in cleared:
        shutil.rmtree(root / name, ignore_errors=True)
    return cleared
