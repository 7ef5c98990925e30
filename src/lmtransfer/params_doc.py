"""The README's parameter table, generated from the parameter models so it cannot go stale.

Every key of params.yaml, grouped by section: its default (the value shipped in params.yaml,
see config.py) and its meaning (the field's `description`), with the stages that read the section.

    lmtransfer params                      # print the table (Markdown)
    lmtransfer params --readme README.md   # rewrite it between the README's markers
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .config import FinetuneParams, Params

START_MARKER = "<!-- params-table:start -->"
END_MARKER = "<!-- params-table:end -->"
REGENERATE = "lmtransfer params --readme README.md"

# Which stages read each section (mirrors the `params:` lists of dvc.yaml; a test keeps them equal).
# None = the whole section, else the keys that stage declares.
PER_SEED_STAGES = ("finetune_pretrained", "finetune_scratch")
_FINETUNE_RECIPE = tuple(key for key in FinetuneParams.model_fields if key != "seeds")
SECTION_READERS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "data": {"validate": None, "prepare": None},
    "tokenizer": {"validate": None, "tokenize": None},
    "model": {"validate": None, "pretrain": None, "finetune_scratch": None},
    "pretrain": {"validate": ("init_from", "objective"), "pretrain": None, "finetune_scratch": ("objective",)},
    "finetune": {
        "finetune_pretrained": _FINETUNE_RECIPE,
        "finetune_scratch": _FINETUNE_RECIPE,
        "evaluate": ("seeds",),
        "plot": ("seeds",),
    },
    "train": {
        "validate": ("device",),
        "pretrain": ("seed", "device", "num_threads", "nproc", "compile", "log_every"),  # not resume_every
        "finetune_pretrained": ("device", "num_threads", "nproc", "compile"),
        "finetune_scratch": ("device", "num_threads", "nproc", "compile"),
    },
    "evaluate": {"evaluate": None},
    "baseline": {"baseline": None},
    "plot": {"plot": None},
}
SECTION_NOTES = {
    "model": "`finetune_pretrained` takes its shape from the pretrained checkpoint",
}


def format_value(value: Any) -> str:
    """A default as it is written in params.yaml: `true`, `''`, `[1, 2]`, `["the movie was"]`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value or "''"
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(v) if isinstance(v, str) else format_value(v) for v in value) + "]"
    return str(value)


def _stage(name: str) -> str:
    return f"`{name}@<seed>`" if name in PER_SEED_STAGES else f"`{name}`"


def _readers(section: str) -> str:
    keys = list(Params.model_fields[section].annotation.model_fields)
    phrases = []
    for stage, read in SECTION_READERS[section].items():
        if read is None or list(read) == keys:
            phrases.append(_stage(stage))
        elif len(read) <= len(keys) // 2:
            phrases.append(f"{_stage(stage)} ({', '.join(f'`{key}`' for key in read)})")
        else:
            left_out = ", ".join(f"`{key}`" for key in keys if key not in read)
            phrases.append(f"{_stage(stage)} (all but {left_out})")
    return ", ".join(phrases)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def params_table() -> str:
    """One Markdown table per section, each headed by the stages that read it."""
    blocks = []
    for section, field in Params.model_fields.items():
        heading = f"**`{section}`**, read by {_readers(section)}"
        if section in SECTION_NOTES:
            heading += f"; {SECTION_NOTES[section]}"
        rows = [heading, "", "| key | default | meaning |", "|---|---|---|"]
        for key, info in field.annotation.model_fields.items():
            default = format_value(info.get_default(call_default_factory=True))
            rows.append(f"| `{section}.{key}` | `{_cell(default)}` | {_cell(info.description or '')} |")
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks) + "\n"


def _marked_span(text: str, origin: str) -> tuple[int, int]:
    """Where the generated table sits: between the end of the start marker's line and the end marker."""
    start, end = text.find(START_MARKER), text.find(END_MARKER)
    if start < 0 or end < 0 or end < start or text.count(START_MARKER) != 1 or text.count(END_MARKER) != 1:
        raise ValueError(
            f"{origin}: expected one {START_MARKER} line followed by one {END_MARKER} line around the parameter table"
        )
    return text.index("\n", start) + 1, end


def table_in(text: str, origin: str = "README") -> str:
    """The table currently between the markers."""
    begin, end = _marked_span(text, origin)
    return text[begin:end].strip("\n") + "\n"


def with_table(text: str, table: str, origin: str = "README") -> str:
    """`text` with the part between the markers replaced by `table` (one blank line on each side)."""
    begin, end = _marked_span(text, origin)
    return f"{text[:begin]}\n{table.strip(chr(10))}\n\n{text[end:]}"


def update_readme(path: Path) -> bool:
    """Rewrite the table between the markers of `path`; True when the file changed."""
    text = path.read_text(encoding="utf-8")
    updated = with_table(text, params_table(), str(path))
    if updated == text:
        return False
    path.write_text(updated, encoding="utf-8")
    return True
