"""A file a parameter names as an input must not be an output of the pipeline (its dvc.yaml), or every `dvc repro`
would start from the previous run's. A matrix output (`seed${item.seed}.pt`) matches any value of its items."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from lmtransfer.core.errors import ConfigError

PIPELINE = Path("dvc.yaml")  # the stages run in their pipeline's folder
_ITEM = re.compile(r"\\\$\\\{[^}]*\\\}")  # a ${...} of an output path, once escaped for a pattern


def writing_stage(path: str | Path, pipeline: Path = PIPELINE) -> tuple[str, str] | None:
    """(stage, folder) when a stage of `pipeline` writes `path` (folder: the output folder holding it, or '')."""
    if not pipeline.is_file():
        return None
    try:
        stages = (YAML(typ="safe", pure=True).load(pipeline.read_text(encoding="utf-8")) or {}).get("stages") or {}
    except (YAMLError, OSError, UnicodeDecodeError):
        return None  # DVC itself names a broken dvc.yaml before any stage runs
    folder = pipeline.resolve().parent
    target = Path(os.path.abspath(path))
    try:
        relative = target.relative_to(folder).as_posix()
    except ValueError:
        return None  # outside the pipeline's folder: no stage of it writes there
    for name, stage in stages.items():
        for entry in [*stage.get("outs", []), *stage.get("metrics", []), *stage.get("plots", [])]:
            output = str(next(iter(entry))) if isinstance(entry, dict) else str(entry)
            pattern = _ITEM.sub("[^/]+", re.escape(output.rstrip("/")))
            if re.fullmatch(pattern, relative):
                return name, ""
            if re.fullmatch(rf"{pattern}/.*", relative):
                return name, output.rstrip("/")
    return None


def refuse_pipeline_output(path: str, key: str, pipeline: Path = PIPELINE) -> None:
    if found := writing_stage(path, pipeline):
        stage, folder = found
        inside = f"inside {folder}/, " if folder else ""
        raise ConfigError(
            f"{key}={path}: an output of this pipeline ({inside}written by stage '{stage}'), so every run would start "
            f"from the previous run's results and `dvc repro` would never settle; copy the file outside the "
            f"pipeline's outputs (e.g. cp {path} checkpoints/start.pt) and name the copy")
