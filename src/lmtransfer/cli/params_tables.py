"""The parameter tables of docs/guide/parameters.md (`lmtransfer params`): every key of a task's params file with its
value, its meaning (the parameter model's field description) and the stages that read it (the task's dvc.yaml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

PAGE = "docs/guide/parameters.md"
FOLDERS = {"classification": Path("."), "translation": Path("translation")}
MARKERS = {task: (f"<!-- {prefix}params-table:start -->", f"<!-- {prefix}params-table:end -->")
           for task, prefix in (("classification", ""), ("translation", "translation-"))}


def _model(task: str):
    from lmtransfer.classification.config import ClassificationParams
    from lmtransfer.translation.config import TranslationParams

    return TranslationParams if task == "translation" else ClassificationParams


def format_value(value: Any) -> str:
    """A value as params.yaml writes it: `true`, `''`, `[1, 2]`, `["the movie was"]`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value or "''"
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(v) if isinstance(v, str) else format_value(v) for v in value) + "]"
    return str(value)


def readers(dvc_yaml: dict, section: str, keys: list[str]) -> str:
    """`validate`, `pretrain@…` (all but `seeds`), `evaluate` (`seeds`): the stages whose params read the section."""
    phrases = []
    for name, stage in dvc_yaml["stages"].items():
        entries = [e for entry in stage.get("params", [])  # a key, or {params.yaml: [keys]} (a YAML anchor's list)
                   for e in ([entry] if isinstance(entry, str) else [k for listed in entry.values() for k in listed])]
        read = [key for entry in entries for key in (keys if entry == section else [entry.removeprefix(f"{section}.")]
                                                     if entry.startswith(f"{section}.") else [])]
        if not read:
            continue
        shown = f"`{name}@…`" if "matrix" in stage or "foreach" in stage else f"`{name}`"
        if len(read) < len(keys):
            left_out = [key for key in keys if key not in read]
            listed, which = (read, "") if len(read) <= len(left_out) else (left_out, "all but ")
            shown += f" ({which}{', '.join(f'`{key}`' for key in listed)})"
        phrases.append(shown)
    return ", ".join(phrases) or "no stage"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def params_table(task: str = "classification", root: Path = Path(".")) -> str:
    folder = root / FOLDERS[task]
    values = YAML(typ="safe").load((folder / "params.yaml").read_text(encoding="utf-8"))
    dvc_yaml = YAML(typ="safe").load((folder / "dvc.yaml").read_text(encoding="utf-8"))
    fields = _model(task).model_fields
    blocks = []
    for section, keys in values.items():
        if not isinstance(keys, dict):
            continue
        model = getattr(fields.get(section), "annotation", None)
        meanings = {key: info.description or "" for key, info in getattr(model, "model_fields", {}).items()}
        rows = [f"**`{section}`**, read by {readers(dvc_yaml, section, list(keys))}", "",
                "| key | value in params.yaml | meaning |", "|---|---|---|"]
        rows += [f"| `{section}.{key}` | `{_cell(format_value(value))}` | {_cell(meanings.get(key, ''))} |"
                 for key, value in keys.items()]
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks) + "\n"


def with_tables(text: str, origin: str, root: Path = Path(".")) -> str:
    """`text` with each task's table between its markers regenerated."""
    found = [task for task, (start, end) in MARKERS.items() if start in text or end in text] or ["classification"]
    for task in found:
        start, end = MARKERS[task]
        if text.count(start) != 1 or text.count(end) != 1 or text.index(end) < text.index(start):
            raise ValueError(f"{origin}: expected one {start} line followed by one {end} line")
        begin = text.index("\n", text.index(start)) + 1
        text = f"{text[:begin]}\n{params_table(task, root).strip()}\n\n{text[text.index(end):]}"
    return text


def update_readme(path: Path, root: Path = Path(".")) -> bool:
    """Rewrite the tables of `path`; True when it changed."""
    text = path.read_text(encoding="utf-8")
    updated = with_tables(text, str(path), root)
    if updated != text:
        path.write_text(updated, encoding="utf-8")
    return updated != text
