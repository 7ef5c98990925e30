"""The committed result files the docs' generated tables and stated values are read from.

Every value is fetched by file and dotted key, so a missing file, a missing key or a broken number is reported
as `file: key` and never reaches a page as a wrong number.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmtransfer.core.io import read_tsv
from lmtransfer.core.paths import (
    BASELINE_METRICS,
    EVALUATE_DETAILS,
    EVALUATE_REPORT,
    FINETUNE_METRICS,
    TIMINGS,
    TRANSLATION_ROOT,
    VARIANTS,
    finetune_epochs,
)

EVALUATE = EVALUATE_REPORT.as_posix()
BASELINE = BASELINE_METRICS.as_posix()
TRANSLATION = (TRANSLATION_ROOT / EVALUATE_REPORT).as_posix()  # the translation pipeline's own, in its folder
SCALING = "results/scaling/summary.json"
STAGE_TIMINGS = f"{TIMINGS.as_posix()}/"  # each training stage's timing files, in a committed run's folder too
LABEL_CURVE = (EVALUATE_DETAILS / "label_curve.tsv").as_posix()  # evaluate's, with finetune.label_sizes
BENCHMARK = "bench."  # `bench.NAME`: the table, or a value, benchmarks/results/NAME.json holds
BENCHMARK_RESULTS = "benchmarks/results"


@dataclass(frozen=True)
class ResultRun:
    """A run of the classification pipeline committed under results/ (its README.md says how it was made). The
    docs read it by its name: sources `NAME` (evaluate.json), `NAME-baseline`, `NAME-run` (run.json: commit,
    machine, command, wall time), `NAME-timings` and, with a label curve, `NAME-labels`; tables `NAME-test` and
    `NAME-labels`."""

    folder: str
    texts: str  # what its test examples are, as its table's header names them
    label_curve: bool  # whether it ran `finetune.label_sizes`


RESULT_RUNS = {
    # the built-in run with the IMDB reviews as its language model's corpus, on a CPU
    "reviews-cpu": ResultRun("results/reviews-cpu/", "sentences", label_curve=True),
    # the built-in network on IMDb's own reviews (data.source imdb), on a CPU
    "imdb-cpu": ResultRun("results/imdb-cpu/", "reviews", label_curve=True),
}


class MetricsError(ValueError):
    """A metrics file missing or unreadable, or without a value a table needs; the message names file and key."""


def finite(value: Any, where: str) -> float:
    """A number a cell can show: NaN, a string or a bool in a metrics file is a broken run, not a value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MetricsError(f"{where} is {value!r}, not a finite number")
    return float(value)


def _index(part: str, size: int) -> int | None:
    """`0`, `2`, `-1` (the last): a list index in a dotted key, when in range."""
    if part.lstrip("-").isdigit() and -size <= int(part) < size:
        return int(part)
    return None


class Source:
    """One metrics JSON file; values are fetched by dotted key, so every error names the file and the key."""

    def __init__(self, root: Path, rel: str, data: Any = None) -> None:
        self.rel = rel
        if data is not None:  # values computed from several files, `rel` naming them
            self.data = data
            return
        try:
            self.data = json.loads((Path(root) / rel).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise MetricsError(f"{rel} is missing") from None
        except json.JSONDecodeError as error:
            raise MetricsError(f"{rel} is not JSON (line {error.lineno}: {error.msg})") from None
        except (OSError, UnicodeDecodeError) as error:
            raise MetricsError(f"{rel} cannot be read ({error})") from None

    def get(self, key: str) -> Any:
        """The value at a dotted key; a list takes an index (`budgets.0.gap`, `budgets.-1.gap`), and a dict's own
        key may hold dots (`base.pretrain.max_steps` reads `{"base": {"pretrain.max_steps": ...}}`)."""
        node, parts = self.data, key.split(".")
        while parts:
            if isinstance(node, list) and _index(parts[0], len(node)) is not None:
                node, parts = node[_index(parts[0], len(node))], parts[1:]
                continue
            joined = next((n for n in range(len(parts), 0, -1)
                           if isinstance(node, dict) and ".".join(parts[:n]) in node), 0)
            if not joined:
                raise MetricsError(f"{self.rel} has no {key!r}")
            node, parts = node[".".join(parts[:joined])], parts[joined:]
        return node

    def number(self, key: str) -> float:
        return finite(self.get(key), f"{self.rel}: {key!r}")

    def numbers(self, key: str) -> list[float]:
        values = self.get(key)
        if not isinstance(values, list) or not values:
            raise MetricsError(f"{self.rel}: {key!r} is {values!r}, not a list of numbers")
        return [finite(value, f"{self.rel}: {key!r}[{i}]") for i, value in enumerate(values)]

    def count(self, key: str) -> int:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise MetricsError(f"{self.rel}: {key!r} is {value!r}, not a positive whole number")
        return value

    def cell(self, path: str) -> Any:
        """A cell of a benchmark's table (`benchmarks/results_file.py`): `CELL/.../COLUMN` is the one row whose
        leading cells read CELL, ... and the column named COLUMN."""
        parts, names = path.split("/"), [entry.get("name") for entry in self.get("columns")]
        cut = next((n for n in range(1, len(parts)) if "/".join(parts[-n:]) in names), 0)  # `ours/course` is a name
        if not cut:
            raise MetricsError(f"{self.rel} has no column {parts[-1]!r}; its columns: {', '.join(map(str, names))}")
        leading, column = parts[:-cut], "/".join(parts[-cut:])
        rows = [row for row in self.get("rows")
                if len(row) > len(leading) and [str(cell) for cell in row[:len(leading)]] == leading]
        if len(rows) != 1:
            found = "no row" if not rows else f"{len(rows)} rows"
            raise MetricsError(f"{self.rel}: {found} whose leading cells are {' / '.join(leading)!r}")
        return rows[0][names.index(column)]


def tokens_text(value: float) -> str:
    """A token count as the tables write it: `2.23M` from 100,000 on, else whole."""
    return f"{value / 1e6:,.2f}M" if value >= 1e5 else f"{value:,.0f}"


def named_files(files: tuple[str, ...] | list[str]) -> str:
    """`a gives`, `a and b give`: the files a stale table or value comes from."""
    if len(files) == 1:
        return f"{files[0]} gives"
    return f"{', '.join(files[:-1])} and {files[-1]} give"


def translation_runs(report: Source) -> list[str]:
    """The runs the translation report scored (`0-0`, `1-0`, ...: pretraining run, fine-tuning seed)."""
    runs = report.get("runs")
    if not isinstance(runs, list) or not runs or not all(isinstance(run, str) for run in runs):
        raise MetricsError(f"{report.rel}: 'runs' is {runs!r}, not a list of run names")
    return runs


def epoch_means(root: Path, variant: str, runs: list[str], column: str) -> list[float]:
    """`column` of each run's per-epoch log of the translation fine-tune, averaged over the runs."""
    curves = []
    for run in runs:
        rel = (TRANSLATION_ROOT / finetune_epochs(variant, run)).as_posix()
        try:
            rows = read_tsv(Path(root) / rel)
        except (OSError, IndexError) as error:
            raise MetricsError(f"{rel} cannot be read ({error or 'empty'})") from None
        if not rows or column not in rows[0]:
            raise MetricsError(f"{rel} has no column {column!r}")
        curves.append([finite(float(row[column]), f"{rel}: {column!r}") for row in rows])
    if len({len(curve) for curve in curves}) != 1:
        raise MetricsError(f"{(TRANSLATION_ROOT / FINETUNE_METRICS / variant).as_posix()}: the runs logged different "
                           "numbers of epochs")
    return [sum(values) / len(values) for values in zip(*curves)]


def label_curve(root: Path, rel: str) -> Source:
    """evaluate's label_curve.tsv (`finetune.label_sizes`) as a source: row `i`'s numbers at `i.<column>`, the
    `labels` column as written (`all` for the whole train split)."""
    try:
        rows = read_tsv(Path(root) / rel)
    except FileNotFoundError:
        raise MetricsError(f"{rel} is missing") from None
    if not rows:
        raise MetricsError(f"{rel} holds no row")
    numbers = []
    for line, row in enumerate(rows, start=2):
        try:
            numbers.append({key: value if key == "labels" else float(value) for key, value in row.items()})
        except (TypeError, ValueError):
            raise MetricsError(f"{rel}, line {line}: a cell is not a number: {row}") from None
    return Source(root, rel, data=numbers)


def timings(root: Path, rel: str) -> Source:
    """A run's timings/ folder (each training stage's own wall time and throughput) as one source: a file's
    values at `<its name without .json>.<key>`, e.g. `pretrain_seed1.seconds`."""
    folder = Path(root) / rel
    if not folder.is_dir():
        raise MetricsError(f"{rel} is missing")
    names = sorted(path.name for path in folder.glob("*.json"))
    if not names:
        raise MetricsError(f"{rel} holds no timing file")
    return Source(root, rel, data={name.removesuffix(".json"): Source(root, rel + name).data for name in names})


TRANSLATION_EPOCHS = f"{(TRANSLATION_ROOT / FINETUNE_METRICS).as_posix()}/"


def translation_epochs(root: Path) -> Source:
    """The translation fine-tunes' validation curves, mean of the seeds, as one source:
    `{variant}.{val_loss|val_bleu}` is a list, one number per epoch."""
    runs = translation_runs(Source(root, TRANSLATION))
    data = {variant: {column: epoch_means(root, variant, runs, column) for column in ("val_loss", "val_bleu")}
            for variant in VARIANTS}
    return Source(root, TRANSLATION_EPOCHS, data)
