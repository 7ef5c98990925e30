"""Every `LMTRANSFER_*` environment variable, defined, parsed and checked here only. At the first import a bad value
counts as unset (`read_at_import`); every entry point's `check()` then refuses it in one line."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lmtransfer.core.errors import ConfigError


@dataclass(frozen=True)
class Knob:
    name: str
    takes: str  # for the messages and the docs
    unset: str
    meaning: str
    parse: Callable[[str], Any]  # ValueError or KeyError for a value outside `takes`


def _choice(*allowed: str) -> Callable[[str], str]:
    return lambda text: {value: value for value in allowed}[text.lower()]


def _whole_number(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError
    return int(text)


def _switch(text: str) -> bool:
    return {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False,
            "off": False}[text.lower()]


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
         "where the pinned dataset packages are kept once downloaded", str),
    Knob(DEBUG, "1 or 0 (also true/false, yes/no, on/off)", "0",
         "1: an expected error keeps its traceback, and MLflow's own database errors are logged", _switch),
    Knob(EXPERIMENT, "any MLflow experiment name", "lmtransfer (lmtransfer-<task> for another task)",
         "the MLflow experiment the runs go to", str),
    Knob(PIPELINE_ID, "any text", "exp-<DVC experiment>, else one per `dvc repro`",
         "which stage runs are grouped under one MLflow pipeline run", str),
)}


def _parsed(name: str) -> tuple[Any, str | None]:
    knob, text = KNOBS[name], os.environ.get(name, "")
    if not text.strip():
        return None, None
    try:
        return knob.parse(text.strip()), None
    except (ValueError, KeyError):
        return None, f"{name}={text!r}: expected {knob.takes}; unset, it is {knob.unset}"


def check() -> None:
    """Refuse every variable set to a value it does not take, in one message."""
    found = [line for name in KNOBS if (line := _parsed(name)[1])]
    if found:
        raise ConfigError("; ".join(found))


def read(name: str) -> Any:
    value, line = _parsed(name)
    if line:
        raise ConfigError(line)
    return value


def read_at_import(name: str) -> Any:
    """As `read`, but a bad value counts as unset: the first import must not raise."""
    return _parsed(name)[0]


def markdown_table() -> str:
    rows = ["| variable | takes | unset | what it does |", "|---|---|---|---|"]
    rows += [f"| `{k.name}` | {k.takes} | {k.unset} | {k.meaning} |" for k in sorted(KNOBS.values(), key=lambda k: k.name)]
    return "\n".join(rows)
