"""The parameter tables of docs/guide/parameters.md, generated from the parameter models so they cannot go stale.

Every key of a task's params file, grouped by section: its value in that file (the one place
values live) and its meaning (the field's `description`), with the stages that read the section.

    lmtransfer params                                    # print the classification table (Markdown)
    lmtransfer params --translation                      # translation/params.yaml's
    lmtransfer params --readme README.md                 # rewrite both between the README's markers
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmtransfer.classification.config import ClassificationParams, ClassificationPretrainParams, FinetuneParams
from lmtransfer.core.config import PipelineParams, parse_section_model, read_params_file, split_task
from lmtransfer.core.paths import TRANSLATION_ROOT
from lmtransfer.translation.config import TranslationFinetuneParams, TranslationParams

START_MARKER = "<!-- params-table:start -->"
END_MARKER = "<!-- params-table:end -->"
PAGE = "docs/guide/parameters.md"  # where both tasks' tables live
REGENERATE = f"lmtransfer params --readme {PAGE}"

# Which stages read each section (mirrors the `params:` lists of dvc.yaml; a test keeps them equal).
# None = the whole section, else the keys that stage declares.
_FINETUNE_RECIPE = tuple(key for key in FinetuneParams.model_fields if key not in ("seeds", "label_sizes", "label_seed"))
_PRETRAIN_RECIPE = tuple(key for key in ClassificationPretrainParams.model_fields if key != "seeds")
# How each task's docs name its matrix stages (one stage per seed, or per pretraining run and seed).
TRANSLATION_STAGE_NAMES = {"pretrain": "pretrain@<p>", "finetune_pretrained": "finetune_pretrained@<p>-<seed>",
                           "finetune_scratch": "finetune_scratch@<p>-<seed>"}  # pretraining runs, each fine-tuned per seed
STAGE_NAMES = {**TRANSLATION_STAGE_NAMES, "finetune_pretrained_labels": "finetune_pretrained_labels@<size>-<p>-<seed>",
               "finetune_scratch_labels": "finetune_scratch_labels@<size>-<p>-<seed>"}  # and the label curve's
SECTION_READERS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "data": {"validate": None, "prepare": None},
    "tokenizer": {"validate": None, "tokenize": None},
    "model": {"validate": None, "pretrain": None, "finetune_scratch": None, "finetune_scratch_labels": None},
    "pretrain": {"validate": ("init_from", "objective"), "pretrain": _PRETRAIN_RECIPE,
                 "finetune_scratch": ("objective",), "finetune_scratch_labels": ("objective",),
                 "evaluate": ("seeds",), "plot": ("seeds",)},
    "finetune": {
        "validate": ("label_sizes",),
        "finetune_pretrained": _FINETUNE_RECIPE,
        "finetune_scratch": _FINETUNE_RECIPE,
        "finetune_pretrained_labels": (*_FINETUNE_RECIPE, "label_seed"),
        "finetune_scratch_labels": (*_FINETUNE_RECIPE, "label_seed"),
        "evaluate": ("seeds", "label_sizes", "label_seed"),
        "plot": ("seeds",),
    },
    "train": {
        "validate": ("device",),
        "pretrain": ("device", "num_threads", "nproc", "compile", "log_every"),  # not resume_every
        **{stage: ("device", "num_threads", "nproc", "compile") for stage in
           ("finetune_pretrained", "finetune_scratch", "finetune_pretrained_labels", "finetune_scratch_labels")},
    },
    "evaluate": {"evaluate": None},
    "baseline": {"baseline": None, "evaluate": None},
    "plot": {"plot": None},
}
SECTION_NOTES = {
    "model": "`finetune_pretrained` takes its shape from the pretrained checkpoint",
}

# The same for translation/dvc.yaml (the same test keeps them equal).
_TRANSLATION_RECIPE = tuple(key for key in TranslationFinetuneParams.model_fields if key != "seeds")
TRANSLATION_SECTION_READERS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "data": {"prepare": None},
    "tokenizer": {"prepare": None, "tokenize": None},  # prepare checks what later stages read (translation/inputs.py)
    "model": {"pretrain": None, "finetune_scratch": None},
    "pretrain": {"prepare": ("init_from",), "pretrain": _PRETRAIN_RECIPE, "finetune_scratch": ("objective",),
                 "evaluate": ("seeds",), "plot": ("seeds",)},
    "finetune": {
        "prepare": ("max_len", "examples"),
        "finetune_pretrained": _TRANSLATION_RECIPE,
        "finetune_scratch": _TRANSLATION_RECIPE,
        "evaluate": ("seeds",),
        "plot": ("seeds",),
    },
    "train": {
        "pretrain": ("device", "num_threads", "nproc", "compile", "log_every"),
        "finetune_pretrained": ("device", "num_threads"),
        "finetune_scratch": ("device", "num_threads"),
    },
    "evaluate": {"prepare": ("lab_sentences",), "evaluate": None},
    "plot": {"plot": None},
}
TRANSLATION_SECTION_NOTES = {
    "model": "the encoder–decoder takes the language model's shape, its N layers on each side; "
             "`finetune_pretrained` reads it from the pretrained checkpoint",
}


@dataclass(frozen=True)
class TaskTable:
    """One task's table: its parameter model, who reads each section, and the README markers around it."""

    params: type[PipelineParams]
    readers: dict[str, dict[str, tuple[str, ...] | None]]
    notes: dict[str, str]
    start: str
    end: str
    stage_names: dict[str, str]  # a matrix stage's name as the docs write it
    params_file: Path  # whose values the table shows: params.yaml is the one place they live


TABLES = {
    "classification": TaskTable(ClassificationParams, SECTION_READERS, SECTION_NOTES, START_MARKER, END_MARKER, STAGE_NAMES,
                                Path("params.yaml")),
    "translation": TaskTable(TranslationParams, TRANSLATION_SECTION_READERS, TRANSLATION_SECTION_NOTES,
                             "<!-- translation-params-table:start -->", "<!-- translation-params-table:end -->",
                             TRANSLATION_STAGE_NAMES, TRANSLATION_ROOT / "params.yaml"),
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


def _stage(table: TaskTable, name: str) -> str:
    return f"`{table.stage_names.get(name, name)}`"


def _readers(table: TaskTable, section: str) -> str:
    keys = list(table.params.model_fields[section].annotation.model_fields)
    phrases = []
    for stage, read in table.readers[section].items():
        if read is None or list(read) == keys:
            phrases.append(_stage(table, stage))
        elif len(read) <= len(keys) // 2:
            phrases.append(f"{_stage(table, stage)} ({', '.join(f'`{key}`' for key in read)})")
        else:
            left_out = ", ".join(f"`{key}`" for key in keys if key not in read)
            phrases.append(f"{_stage(table, stage)} (all but {left_out})")
    return ", ".join(phrases)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def params_table(task: str = "classification") -> str:
    """One Markdown table per section, each headed by the stages that read it, with the values of the task's
    params file (translation ships other values than classification for some of the same fields)."""
    table = TABLES[task]
    defaults = parse_section_model(table.params, split_task(read_params_file(table.params_file), "")[1],
                                   str(table.params_file))
    blocks = []
    for section in table.params.model_fields:
        heading = f"**`{section}`**, read by {_readers(table, section)}"
        if section in table.notes:
            heading += f"; {table.notes[section]}"
        rows = [heading, "", "| key | default | meaning |", "|---|---|---|"]
        values = getattr(defaults, section)
        for key, info in type(values).model_fields.items():
            default = format_value(getattr(values, key))
            rows.append(f"| `{section}.{key}` | `{_cell(default)}` | {_cell(info.description or '')} |")
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks) + "\n"


def _marked_span(text: str, origin: str, task: str) -> tuple[int, int]:
    """Where the generated table sits: between the end of the start marker's line and the end marker."""
    start_marker, end_marker = TABLES[task].start, TABLES[task].end
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < 0 or end < start or text.count(start_marker) != 1 or text.count(end_marker) != 1:
        raise ValueError(
            f"{origin}: expected one {start_marker} line followed by one {end_marker} line around the {task} "
            "parameter table"
        )
    return text.index("\n", start) + 1, end


def table_in(text: str, origin: str = "README", task: str = "classification") -> str:
    """The table currently between the task's markers."""
    begin, end = _marked_span(text, origin, task)
    return text[begin:end].strip("\n") + "\n"


def with_table(text: str, table: str, origin: str = "README", task: str = "classification") -> str:
    """`text` with the part between the task's markers replaced by `table` (one blank line on each side)."""
    begin, end = _marked_span(text, origin, task)
    return f"{text[:begin]}\n{table.strip(chr(10))}\n\n{text[end:]}"


def update_readme(path: Path) -> bool:
    """Rewrite every task's table whose markers `path` has (all checked before anything is written); True when
    the file changed."""
    text = path.read_text(encoding="utf-8")
    marked = [task for task, table in TABLES.items() if table.start in text or table.end in text]
    updated = text
    for task in marked or ["classification"]:  # no markers at all: the classification table's error names them
        updated = with_table(updated, params_table(task), str(path), task)
    if updated == text:
        return False
    path.write_text(updated, encoding="utf-8")
    return True
