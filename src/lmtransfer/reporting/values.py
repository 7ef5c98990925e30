"""Numbers stated in the docs' sentences, each read from a committed result file, so a sentence cannot go stale.

A number in a sentence of README.md or docs/**/*.md is wrapped, on one line, in two HTML comments that GitHub
does not render:

    the gap, <!-- value:evaluate:gap.accuracy_mean:+.4f -->+0.0472<!-- /value -->, ...

`<!-- value:SOURCE:PATH:FORMAT -->` names where the number comes from and how it is written:

* SOURCE: a key of `SOURCES` (`evaluate` is metrics/evaluate.json) or of `COMPUTED` (`translation-epochs`:
  `pretrained.val_loss.-1`, the last epoch's validation loss, mean of the seeds), `bench.NAME` for the file
  benchmarks/results/NAME.json a benchmark wrote, or `derived` for a number computed from several files
  (`DERIVED`, where PATH is its name).
* PATH: a dotted key into the JSON (`gap.ci95_low`; a list index, `-1` the last: `budgets.3.gap`), or, in a
  benchmark's table, `CELL/.../COLUMN`: the row whose leading cells read CELL, ... and its column COLUMN.
* FORMAT: a Python format spec (`.4f`, `+.3f`, `,.0f`, `.0%`), or `pt` and a spec for a fraction in points
  (x 100: `pt+.1f`), `duration` for seconds as minutes and seconds (`12 min 56 s`), `tokens` for a token
  count as the tables write it (`2.23M`), `len` for the length of a list (the epochs of a curve), `low` or
  `high` and a spec for the lowest or highest number of a list; left out, text as it is and a number as `g`
  writes it.

`lmtransfer report` rewrites the text between the comments from the source; `lmtransfer report --check` names
page and line of each stated number that differs from it. A marker in fenced code or in a code span is text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from lmtransfer.reporting.sources import (
    BASELINE,
    BENCHMARK,
    BENCHMARK_RESULTS,
    EVALUATE,
    LABEL_CURVE,
    RESULT_RUNS,
    SCALING,
    STAGE_TIMINGS,
    TRANSLATION,
    TRANSLATION_EPOCHS,
    MetricsError,
    Source,
    finite,
    label_curve,
    named_files,
    timings,
    tokens_text,
    translation_epochs,
)

DERIVED_SOURCE = "derived"

SOURCES: dict[str, str] = {
    "evaluate": EVALUATE,
    "baseline": BASELINE,
    "translation": TRANSLATION,
    "course": "results/course/" + EVALUATE,  # the course's committed run (make course)
    "scaling": SCALING,
    "scaling-1x-replicated": "results/scaling/replicated-1x/evaluate.json",
    "objectives-clm": "results/objectives/clm/evaluate.json",
    "objectives-mlm": "results/objectives/mlm/evaluate.json",
    "objectives-mlm-nsp": "results/objectives/mlm-nsp/evaluate.json",
}

# sources computed from several files (the folder they lie in, how they are read): the translation fine-tunes'
# validation curves, mean of the seeds, per variant
COMPUTED: dict[str, tuple[str, Callable[[Path], Source]]] = {
    "translation-epochs": (TRANSLATION_EPOCHS, translation_epochs),
}
for _name, _run in RESULT_RUNS.items():  # each committed run's files, by its name (`ResultRun`)
    SOURCES |= {_name: _run.folder + EVALUATE, f"{_name}-baseline": _run.folder + BASELINE,
                f"{_name}-run": _run.folder + "run.json"}
    # each training stage's own time: `pretrain_seed1.seconds` is timings/pretrain_seed1.json's `seconds`
    COMPUTED[f"{_name}-timings"] = (_run.folder + STAGE_TIMINGS, partial(timings, rel=_run.folder + STAGE_TIMINGS))
    if _run.label_curve:  # row `i` of the label curve at `i.<column>`
        COMPUTED[f"{_name}-labels"] = (_run.folder + LABEL_CURVE, partial(label_curve, rel=_run.folder + LABEL_CURVE))

VALUE = re.compile(r"<!--\s*value:(?P<key>(?:(?!-->).)+?)\s*-->(?P<text>(?:(?!<!--).)*?)<!--\s*/value\s*-->")
VALUE_LIKE = re.compile(r"<!--\s*/?value\b")  # meant as a value marker, well formed or not
SYNTAX = "`<!-- value:SOURCE:PATH:FORMAT -->TEXT<!-- /value -->`, on one line"


class UnknownValue(KeyError):
    """A SOURCE or derived name with no entry; the message lists the known ones."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _file(source: str) -> str:
    """The file SOURCE names, relative to the repository (a folder, for a source computed from its files)."""
    if source in COMPUTED:
        return COMPUTED[source][0]
    if source.startswith(BENCHMARK):
        return f"{BENCHMARK_RESULTS}/{source.removeprefix(BENCHMARK)}.json"
    if source not in SOURCES:
        raise UnknownValue(f"unknown source {source!r}; known: {', '.join([*SOURCES, *COMPUTED])}, {BENCHMARK}NAME for "
                           f"{BENCHMARK_RESULTS}/NAME.json, and {DERIVED_SOURCE}")
    return SOURCES[source]


class Reader:
    """The result files a page's values read, each read once per run."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.files: dict[str, Source] = {}

    def source(self, name: str) -> Source:
        rel = _file(name)
        if rel not in self.files:
            self.files[rel] = COMPUTED[name][1](self.root) if name in COMPUTED else Source(self.root, rel)
        return self.files[rel]

    def raw(self, name: str, path: str) -> Any:
        source = self.source(name)
        return source.cell(path) if "/" in path and name.startswith(BENCHMARK) else source.get(path)

    def number(self, name: str, path: str) -> float:
        return finite(self.raw(name, path), f"{_file(name)}: {path!r}")


@dataclass(frozen=True)
class Derived:
    """A number computed from values of other files, and the sources it reads (named when it is stale)."""

    compute: Callable[[Reader], float]
    sources: tuple[str, ...]


def _scaling_step(low: int, high: int) -> Callable[[Reader], float]:
    """The gap's change from budget row `low` to row `high` of the scaling study."""
    return lambda read: read.number("scaling", f"budgets.{high}.gap") - read.number("scaling", f"budgets.{low}.gap")


def _tokens_per_hour(read: Reader) -> float:
    """Pretraining tokens the default run pretrains per hour on the machine that ran it: corpus and adaptation
    tokens of one run over its pretrain stage's wall time in benchmarks/results/pipeline.json."""
    tokens = read.number("evaluate", "pretraining.tokens_seen") + read.number("evaluate", "pretraining.adapt_tokens_seen")
    return tokens / read.number("bench.pipeline", "pretrain@0/wall time, s") * 3600


def _cells(read: Reader, source: str, column: str, keep: Callable[[str], bool]) -> list[float]:
    """COLUMN of every row of a benchmark's table whose first cell `keep` accepts."""
    return [read.number(source, f"{row[0]}/{column}") for row in read.source(source).get("rows") if keep(str(row[0]))]


def _slowest_pretraining(read: Reader) -> float:
    """The longest pretrain@<p> stage of the timed default run, seconds."""
    return max(_cells(read, "bench.pipeline", "wall time, s", lambda stage: stage.startswith("pretrain@")))


def _course_loop(workload: str, column: str) -> Callable[[Reader], float]:
    """A pinned-kernel cell of the speed comparison with the course's loop (benchmarks/course_loop.py)."""
    return lambda read: read.number("bench.course_loop", f"pinned (AVX2)/{workload}/{column}")


def _course_share_of_sgemm(read: Reader) -> float:
    """The course's pretraining step at V = 50,001 as a share of the sgemm rate: ours, over how much faster ours is."""
    return _course_loop("pretrain-50001", "% of sgemm")(read) / 100 / _course_loop("pretrain-50001", "ours/course")(read)


def _lowest_cotenancy_fraction(read: Reader) -> float:
    """The smallest share of its speed alone the measured workload kept beside any neighbour."""
    return min(_cells(read, "bench.cotenancy", "fraction", lambda case: not case.startswith(("alone", "neighbour-spin"))))


def _lowest_training_fraction_beside(read: Reader) -> float:
    """The smallest share of its time alone a training stage kept in the pipeline run beside another session."""
    return min(_cells(read, "bench.pipeline-beside-session", "fraction",
                      lambda stage: stage.startswith(("pretrain@", "finetune_"))))


def _translation_finetune_share(read: Reader) -> float:
    """The fine-tunes' share of the stages' time in the timed make run-translation."""
    finetunes = sum(_cells(read, "bench.pipeline-translation", "wall time, s", lambda s: s.startswith("finetune_")))
    return finetunes / read.number("bench.pipeline-translation", "all stages/wall time, s")


DERIVED: dict[str, Derived] = {
    "translation.finetune-share": Derived(_translation_finetune_share, ("bench.pipeline-translation",)),
    "pipeline-beside.lowest-training-fraction": Derived(_lowest_training_fraction_beside,
                                                        ("bench.pipeline-beside-session",)),
    "cotenancy.lowest-fraction": Derived(_lowest_cotenancy_fraction, ("bench.cotenancy",)),
    "cotenancy.alone-vs-default-spin": Derived(
        lambda read: 1 / read.number("bench.cotenancy", "alone-spin-300k/fraction"), ("bench.cotenancy",)),
    "course-loop.flush-lift-4000": Derived(
        lambda read: _course_loop("pretrain-4000", "course+flush tok/s")(read)
        / _course_loop("pretrain-4000", "course tok/s")(read) - 1, ("bench.course_loop",)),
    "course-loop.flush-lift-50001": Derived(
        lambda read: _course_loop("pretrain-50001", "course+flush tok/s")(read)
        / _course_loop("pretrain-50001", "course tok/s")(read) - 1, ("bench.course_loop",)),
    "course-loop.course-share-of-sgemm-50001": Derived(_course_share_of_sgemm, ("bench.course_loop",)),
    "course-loop.ceiling-50001": Derived(lambda read: 1 / _course_share_of_sgemm(read), ("bench.course_loop",)),
    "course-parity.movies-en-epoch-over-course": Derived(
        lambda read: read.number("bench.course_parity-movies-en-curves", "args.train")
        / read.number("bench.course_parity-curves", "args.train"),
        ("bench.course_parity-movies-en-curves", "bench.course_parity-curves")),
    "pipeline.pretrain-max-s": Derived(_slowest_pretraining, ("bench.pipeline",)),
    "pipeline.pretrain-tokens-per-s": Derived(lambda read: _tokens_per_hour(read) / 3600, ("evaluate", "bench.pipeline")),
    "classification.last-epoch-gap": Derived(  # the validation gap after the last fine-tuning epoch
        lambda read: read.number("evaluate", "pretrained.val_accuracy_mean_per_epoch.-1")
        - read.number("evaluate", "scratch.val_accuracy_mean_per_epoch.-1"), ("evaluate",)),
    "objectives.bidirectional-scratch-lead": Derived(
        lambda read: read.number("objectives-mlm", "scratch.accuracy_mean")
        - read.number("objectives-clm", "scratch.accuracy_mean"), ("objectives-mlm", "objectives-clm")),
    "scaling.step-1x-2x": Derived(_scaling_step(3, 4), ("scaling",)),
    "scaling.step-2x-4x": Derived(_scaling_step(4, 5), ("scaling",)),
    "scaling.best-below-baseline": Derived(
        lambda read: read.number("scaling", "baseline_reached.target_accuracy")
        - max(read.number("scaling", f"budgets.{i}.pretrained_accuracy_mean")
              for i in range(len(read.source("scaling").get("budgets")))), ("scaling",)),
    "scaling.gap-slope-per-doubling": Derived(
        lambda read: read.number("scaling", "gap_fit.slope_per_decade") * math.log10(2), ("scaling",)),
    "scaling.baseline-tokens-over-base": Derived(
        lambda read: read.number("scaling", "baseline_reached.tokens") / read.number("scaling", "budgets.3.pretraining_tokens"),
        ("scaling",)),
    "scaling.baseline-hours": Derived(
        lambda read: read.number("scaling", "baseline_reached.tokens") / _tokens_per_hour(read),
        ("scaling", "evaluate", "bench.pipeline")),
    "scaling.baseline-hours-steepest": Derived(
        lambda read: read.number("scaling", "baseline_reached.tokens_at_steepest_slope") / _tokens_per_hour(read),
        ("scaling", "evaluate", "bench.pipeline")),
    "scaling.baseline-days-shallowest": Derived(
        lambda read: read.number("scaling", "baseline_reached.tokens_at_shallowest_slope") / _tokens_per_hour(read) / 24,
        ("scaling", "evaluate", "bench.pipeline")),
}


def _formatted(value: Any, spec: str, where: str) -> str:
    """The text a value is stated as (see the module's FORMAT)."""
    if spec == "len":
        if not isinstance(value, list):
            raise MetricsError(f"{where} is {value!r}, not a list")
        return str(len(value))
    if spec.startswith(("low", "high")):  # the lowest or highest of a list of numbers
        if not isinstance(value, list) or not value:
            raise MetricsError(f"{where} is {value!r}, not a list of numbers")
        numbers = [finite(item, f"{where}[{i}]") for i, item in enumerate(value)]
        value, spec = (min(numbers), spec[3:]) if spec.startswith("low") else (max(numbers), spec[4:])
    if isinstance(value, str):
        if spec:
            raise MetricsError(f"{where} is the text {value!r}, which takes no format ({spec!r})")
        return value
    number: float = finite(value, where)
    if isinstance(value, int):
        number = value  # a count keeps its type: `,` writes 2,113, not 2,113.0
    if spec == "duration":
        seconds = round(number)
        return f"{seconds // 60} min {seconds % 60} s"
    if spec == "tokens":
        return tokens_text(number)
    if spec.startswith("pt"):
        number, spec = number * 100, spec.removeprefix("pt")
    if not spec:
        return f"{number:,}" if isinstance(number, int) else f"{number:g}"
    try:
        return format(number, spec)
    except ValueError:
        raise MetricsError(f"{where}: {spec!r} is not a format") from None


def resolve(key: str, read: Reader) -> str:
    """The text `SOURCE:PATH:FORMAT` states."""
    source, _, rest = key.partition(":")
    path, _, spec = rest.rpartition(":") if rest.count(":") else (rest, "", "")
    if not path:
        raise UnknownValue(f"value {key!r}: expected SOURCE:PATH:FORMAT")
    if source == DERIVED_SOURCE:
        if path not in DERIVED:
            raise UnknownValue(f"unknown derived value {path!r}; known: {', '.join(DERIVED)}")
        return _formatted(DERIVED[path].compute(read), spec, f"derived value {path!r}")
    return _formatted(read.raw(source, path), spec, f"{_file(source)}: {path!r}")


def files_of(key: str) -> list[str]:
    """The files the value `key` is read from, for a stale value's message."""
    source, _, rest = key.partition(":")
    if source == DERIVED_SOURCE and (name := rest.split(":")[0]) in DERIVED:
        return [_file(name) for name in DERIVED[name].sources]
    try:
        return [_file(source)]
    except UnknownValue:
        return []


def _code_spans(line: str) -> list[tuple[int, int]]:
    """Where the line's code spans lie (a run of backticks to the next run of the same length)."""
    spans, at = [], 0
    while (opening := re.compile(r"`+").search(line, at)) is not None:
        ticks = opening.group()
        closing = re.compile(rf"(?<!`){ticks}(?!`)").search(line, opening.end())
        if closing is None:
            break
        spans.append((opening.start(), closing.end()))
        at = closing.end()
    return spans


def _in_code(start: int, spans: list[tuple[int, int]]) -> bool:
    return any(low <= start < high for low, high in spans)


def refresh(lines: list[str], indices: Iterable[int], root: Path, reader: Reader | None = None
            ) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """Rewrite each value marker of `lines[i]` for i in `indices` (the page's prose: no fenced code, no generated
    table) from its source, in place; returns (1-based line, problem) for the stale values and the broken ones."""
    read = reader or Reader(root)
    stale: list[tuple[int, str]] = []
    broken: list[tuple[int, str]] = []
    for index in indices:
        line = lines[index]
        if not VALUE_LIKE.search(line):
            continue
        spans = _code_spans(line)
        pieces, at, used = [], 0, []
        for match in VALUE.finditer(line):
            if _in_code(match.start(), spans):
                continue
            used.append((match.start(), match.end()))
            key, text = match["key"].strip(), match["text"]
            try:
                fresh = resolve(key, read)
            except (UnknownValue, MetricsError) as error:
                broken.append((index + 1, f"value {key!r} cannot be read: {error}"))
                continue
            if text != fresh:
                stale.append((index + 1, f"value {key!r} is {text!r} here, {named_files(files_of(key))} "
                                         f"{fresh!r}; run `lmtransfer report`"))
                pieces.append(line[at:match.start("text")] + fresh)
                at = match.end("text")
        for stray in VALUE_LIKE.finditer(line):
            if not _in_code(stray.start(), spans) and not any(low <= stray.start() < high for low, high in used):
                broken.append((index + 1, f"malformed value marker: expected {SYNTAX}"))
                break
        lines[index] = "".join(pieces) + line[at:]
    return stale, broken
