"""The docs' results tables and stated values, generated from the committed metrics and benchmark result files so
they cannot go stale.

README.md and every docs/**/*.md may hold tables between two markers, each on a line of its own:

    <!-- report:NAME:start -->
    (generated: a blank line, the table for NAME, a blank line)
    <!-- report:NAME:end -->

`write_pages` rewrites what lies between them; `check_pages` lists where a page is stale or its markers
are broken (a test and `lmtransfer report --check` run it). A marker inside a fenced code block is text,
not a marker, so a page can show the syntax. NAME is a key of `TABLES`, or `bench.<name>` for the table a
benchmark wrote to benchmarks/results/<name>.json; `generate` gives its text.

A number in a sentence is marked on its line, `<!-- value:SOURCE:PATH:FORMAT -->0.674<!-- /value -->`, and
rewritten and checked the same way (`lmtransfer.reporting.values`).

    python -m lmtransfer.reporting.pages            # rewrite the tables and values
    python -m lmtransfer.reporting.pages --check    # exit 1 at the first stale or broken table or value
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from lmtransfer.core import knobs
from lmtransfer.core.paths import EVALUATE_REPORT, FINETUNE_METRICS, TRANSLATION_ROOT, VARIANTS
from lmtransfer.reporting import values
from lmtransfer.reporting.sources import (
    BASELINE,
    BENCHMARK,
    BENCHMARK_RESULTS,
    EVALUATE,
    LABEL_CURVE,
    RESULT_RUNS,
    SCALING,
    TRANSLATION,
    MetricsError,
    Source,
    epoch_means,
    finite,
    label_curve,
    named_files,
    tokens_text,
    translation_runs,
)

REGENERATE = "lmtransfer report"
TEST_LABELS = ("pretrained, then fine-tuned", "same network from scratch")

MARKER = re.compile(r"^\s*<!--\s*report:(?P<name>[^:\s]+):(?P<kind>start|end)\s*-->\s*$")
MARKER_LIKE = re.compile(r"^\s*<!--\s*report:")  # a line meant as a marker, well formed or not
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


class UnknownTable(KeyError):
    """A NAME with no generator; the message lists the known ones, so a typo is a one-step fix."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown table {self.name!r}; known: {', '.join(TABLES)}, and {BENCHMARK}NAME for each benchmarks/results/NAME.json"


class PagesError(ValueError):
    """Broken markers, or tables that cannot be generated: `write_pages` writes nothing then."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(f"{problems[0]} ({len(problems)} problem(s) in all)")
        self.problems = problems


# --- formatting: one rule per kind of cell, so every table rounds the same way ------------------------------------


def _signed(value: float, digits: int) -> str:
    return f"{value:+.{digits}f}"


def _joined(values: list[float], digits: int) -> str:
    return ", ".join(f"{value:.{digits}f}" for value in values)


def _bold(text: str, on: bool) -> str:
    return f"**{text}**" if on else text


def _mean_std(source: Source, prefix: str, digits: int) -> str:
    """`prefix_mean ± prefix_std`: the spread over seeds."""
    return f"{source.number(f'{prefix}_mean'):.{digits}f} ± {source.number(f'{prefix}_std'):.{digits}f}"


def _interval(source: Source, prefix: str, digits: int, signed: bool = False) -> str:
    """`[prefix_low, prefix_high]`, signed for a gap (whose sign is the point)."""
    low, high = source.number(f"{prefix}_low"), source.number(f"{prefix}_high")
    show = (lambda x: _signed(x, digits)) if signed else (lambda x: f"{x:.{digits}f}")
    return f"[{show(low)}, {show(high)}]"


def _p(value: float, digits: int) -> str:
    """A p-value at the resolution of its test; one below it reads `p < 0.0001`, never `p = 0.0000`."""
    floor = 10.0 ** -digits
    return f"p < {floor:.{digits}f}" if value < floor / 2 else f"p = {value:.{digits}f}"


def _better(source: Source, key: str, prefix: str = "") -> set[str]:
    """The variant(s) with the higher `key`: the bold one(s)."""
    values = {variant: source.number(f"{prefix}{variant}.{key}") for variant in VARIANTS}
    return {variant for variant, value in values.items() if value == max(values.values())}


def _row(cells: list[str]) -> str:
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, one line per row, ending with a newline."""
    assert all(len(row) == len(header) for row in rows), "a generator built a row of the wrong width"
    return "\n".join([_row(header), "|" + "---|" * len(header), *map(_row, rows)]) + "\n"


def _curves(source: Source) -> tuple[list[float], list[float]]:
    """Each variant's validation accuracy per epoch (mean of seeds); both variants must have the same epochs."""
    pretrained, scratch = (source.numbers(f"{variant}.val_accuracy_mean_per_epoch") for variant in VARIANTS)
    if len(pretrained) != len(scratch):
        raise MetricsError(f"{source.rel}: {len(pretrained)} epochs for pretrained, {len(scratch)} for scratch")
    return pretrained, scratch


# --- the tables -------------------------------------------------------------------------------------------------


COURSE = "results/course/"  # the course's committed run (make course): its metrics/


def _classification_test(root: Path, folder: str = "", texts: str = "sentences") -> str:
    """README, "The answer": test accuracy and macro-F1 per variant, the gap with its interval, the baseline (of
    the pipeline in `folder`: the course's too)."""
    report, baseline = Source(root, folder + EVALUATE), Source(root, folder + BASELINE)
    better = _better(report, "accuracy_mean")
    rows = [[label, _bold(_mean_std(report, f"{variant}.accuracy", 4), variant in better),
             _joined(report.numbers(f"{variant}.accuracy_per_seed"), 4), _mean_std(report, f"{variant}.macro_f1", 4)]
            for variant, label in zip(VARIANTS, TEST_LABELS)]
    gap = (f"**{_signed(report.number('gap.accuracy_mean'), 4)}**, 95% CI {_interval(report, 'gap.ci95', 4, True)}, "
           f"{_p(report.number('gap.p_value'), 4)}")
    rows.append(["**gap** (pretrained − scratch)", gap, "", _signed(report.number("gap.macro_f1_mean"), 4)])
    rows.append(["the gap's variance, each source resampled alone", _spread_shares(report, texts), "", ""])
    rows.append(["TF-IDF + logistic regression (baseline stage)", f"**{baseline.number('accuracy'):.4f}**",
                 "(deterministic)", f"{baseline.number('macro_f1'):.4f}"])
    header = [f"test set, {report.count('n_test_examples'):,} {texts}", f"accuracy (mean ± std over {_design(report)})",
              "per run", "macro-F1"]
    return _table(header, rows)


def _design(report: Source) -> str:
    """`3 pretraining runs × 1 fine-tuning seed`: what a report's means and spreads are taken over."""
    runs, seeds = report.count("n_pretraining_runs"), report.count("n_finetuning_seeds")
    return f"{runs} pretraining run{'s' * (runs != 1)} × {seeds} fine-tuning seed{'s' * (seeds != 1)}"


def _spread_shares(report: Source, texts: str = "sentences") -> str:
    """`pretraining runs 41%, test sentences 59%`: each source's share of the gap's variance (the fine-tuning
    seeds' only when there are several per run: with one, the runs' share holds them; the runs' only when there
    are several: one run has no spread to share)."""
    parts = [("pretraining runs", "pretraining_runs")] if report.count("n_pretraining_runs") > 1 else []
    if report.count("n_finetuning_seeds") > 1:
        parts.append(("fine-tuning seeds", "finetuning_seeds"))
    parts.append((f"test {texts}", "test_examples"))
    return ", ".join(f"{label} {report.number(f'gap.share.{key}'):.0%}" for label, key in parts)


def _classification_epochs(root: Path, folder: str = "") -> str:
    """README, "The answer": validation accuracy per epoch, the first epoch's per seed (the head start)."""
    report, baseline = Source(root, folder + EVALUATE), Source(root, folder + BASELINE)
    pretrained, scratch = _curves(report)
    curves = dict(zip(VARIANTS, (pretrained, scratch)))
    rows = []
    for variant, label in zip(VARIANTS, ("pretrained", "from scratch")):
        seeds = _joined(report.numbers(f"{variant}.first_epoch_val_accuracy_per_seed"), 4)
        rows.append([label, f"{curves[variant][0]:.4f} ({seeds})", *(f"{x:.4f}" for x in curves[variant][1:])])
    gaps = [_signed(p - s, 4) for p, s in zip(pretrained, scratch)]
    epochs = len(gaps)
    rows.append(["gap", f"**{gaps[0]}**", *gaps[1:]])
    rows.append(["TF-IDF baseline", f"{baseline.number('valid_accuracy'):.4f}", *[""] * (epochs - 1)])
    header = [f"validation accuracy (mean of {report.count('n_seeds')} runs)",
              *(f"epoch {epoch}" for epoch in range(1, epochs + 1))]
    return _table(header, rows)


def _label_curve(root: Path, folder: str) -> str:
    """Where pretraining pays: test accuracy per number of labeled examples (evaluate's label_curve.tsv), both
    variants, the gap with its interval and p, TF-IDF trained on the same examples."""
    curve = label_curve(root, folder + LABEL_CURVE)
    rows = curve.data
    report = Source(root, folder + EVALUATE)
    cells = []
    for i, row in enumerate(rows):
        at = str(i)
        size = f"{curve.number(f'{at}.n_train'):,.0f}"
        better = {v for v in VARIANTS if curve.number(f"{at}.{v}") == max(curve.number(f"{at}.{w}") for w in VARIANTS)}
        cells.append([
            f"all ({size})" if row.get("labels") == "all" else size,
            *(_bold(f"{curve.number(f'{at}.{v}'):.4f} ± {curve.number(f'{at}.{v}_std'):.4f}", v in better)
              for v in VARIANTS),
            f"{_signed(curve.number(f'{at}.gap'), 4)} [{_signed(curve.number(f'{at}.gap_low'), 4)}, "
            f"{_signed(curve.number(f'{at}.gap_high'), 4)}], {_p(curve.number(f'{at}.p_value'), 4)}",
            f"{curve.number(f'{at}.baseline'):.4f}",
        ])
    header = ["labeled training examples", f"pretrained (mean ± std, {_design(report)})", "from scratch",
              "gap [95% CI], p", "TF-IDF on the same examples"]
    return _table(header, cells)


# label, folder with the run's evaluate.json, the objective and NSP flag its pretraining summary must record
OBJECTIVE_RUNS = (
    ("`clm` (the earlier default recipe)", "results/objectives/clm", "clm", False),
    ("`mlm`", "results/objectives/mlm", "mlm", False),
    ("`mlm` + NSP", "results/objectives/mlm-nsp", "mlm", True),
)


def _language_model_cell(report: Source, nsp: bool) -> str:
    """The LM's validation perplexity (mean of the pretraining runs); a masked LM's masked (and NSP) accuracy
    beside it."""
    perplexity = f"{report.number('pretraining.val_perplexity'):.1f}"
    if report.get("pretraining.objective") == "clm":
        return f"{perplexity} (next-token)"
    accuracies = f"masked acc {report.number('pretraining.val_masked_accuracy'):.3f}"
    if nsp:
        accuracies += f", NSP acc {report.number('pretraining.val_nsp_accuracy'):.3f}"
    return f"{perplexity} ({accuracies})"


def _objective_row(root: Path, label: str, folder: str, objective: str, nsp: bool) -> list[str]:
    """One run's row; a run whose pretraining records another objective is refused, not mislabelled."""
    report = Source(root, f"{folder}/{EVALUATE_REPORT.name}")
    recorded = (report.get("pretraining.objective"), report.get("pretraining.next_sentence"))
    if recorded != (objective, nsp):
        raise MetricsError(f"{report.rel}: its pretraining records objective {recorded[0]!r}, next_sentence "
                           f"{recorded[1]!r}; the row {label} needs {objective!r}, {nsp}")
    better = _better(report, "accuracy_mean")
    gap = (f"{_signed(report.number('gap.accuracy_mean'), 4)} {_interval(report, 'gap.ci95', 4, True)}, "
           f"{_p(report.number('gap.p_value'), 4)}")
    return [label, _language_model_cell(report, nsp),
            *(f"{p:.4f} vs {s:.4f}" for p, s in zip(*_curves(report))),
            *(_bold(_mean_std(report, f"{variant}.accuracy", 4), variant in better) for variant in VARIANTS), gap]


def _objectives(root: Path) -> str:
    """README, "CLM vs MLM on the same budget": one row per pretraining objective, the baseline below."""
    rows = [_objective_row(root, *run) for run in OBJECTIVE_RUNS]
    epochs = len(rows[0]) - 5  # besides the epochs: objective, LM, test pretrained, test scratch, gap
    if any(len(row) != len(rows[0]) for row in rows):
        raise MetricsError(f"the runs of {', '.join(folder for _, folder, _, _ in OBJECTIVE_RUNS)} differ in epochs")
    baseline = Source(root, BASELINE)
    rows.append(["TF-IDF + logistic regression", "", f"{baseline.number('valid_accuracy'):.4f}", *[""] * (epochs - 1),
                 f"{baseline.number('accuracy'):.4f}", "", ""])
    header = ["objective", "LM validation perplexity", "epoch-1 validation, pretrained vs scratch",
              *(f"epoch {epoch}" for epoch in range(2, epochs + 1)), "test, pretrained", "test, scratch",
              "gap, 95% CI, p"]
    return _table(header, rows)


METRICS = ("bleu", "chrf")


def _score_cells(report: Source, at: str, metric: str, bold: bool) -> list[str]:
    """`mean ± std [interval of the mean]` and the per-seed scores of one variant (`at`) and metric."""
    spread = _bold(_mean_std(report, f"{at}.{metric}", 2), bold)
    return [f"{spread} {_interval(report, f'{at}.{metric}_ci95', 2)}",
            _joined(report.numbers(f"{at}.{metric}_per_seed"), 2)]


def _gap_cells(report: Source, at: str, metric: str) -> list[str]:
    """The gap, its interval and p-value (3 digits: the test resamples 1,000 times), and an empty per-seed cell."""
    mean, p_value = report.number(f"{at}.{metric}_mean"), report.number(f"{at}.{metric}_p_value")
    return [f"**{_signed(mean, 2)}** {_interval(report, f'{at}.{metric}_ci95', 2, True)}, {_p(p_value, 3)}", ""]


def _translation(root: Path, part: str, title: str, gap_label: str, copy_label: str) -> str:
    """Test BLEU and chrF per variant, the gap, the source copied as a baseline.
    `part` is "" for the verses and "clauses." for the short test sentences."""
    report = Source(root, TRANSLATION)
    better = {metric: _better(report, f"{metric}_mean", part) for metric in METRICS}
    rows = [[label, *(cell for metric in METRICS
                      for cell in _score_cells(report, f"{part}{variant}", metric, variant in better[metric]))]
            for variant, label in zip(VARIANTS, TEST_LABELS)]
    rows.append([gap_label, *(cell for metric in METRICS for cell in _gap_cells(report, f"{part}gap", metric))])
    rows.append([copy_label, *(cell for metric in METRICS
                               for cell in (f"{report.number(f'{part}baseline.copy_source_{metric}'):.2f}", ""))])
    header = [title.format(n=f"{report.count(f'{part}n_test_sentences'):,}"), "BLEU", "per run", "chrF", "per run"]
    return _table(header, rows)


def _translation_test(root: Path) -> str:
    """README, translation's default run: the test verses."""
    return _translation(root, "", "test set: {n} verses", "**gap** (pretrained − scratch)",
                        "baseline: the English source copied")


def _translation_clauses(root: Path) -> str:
    """README, translation's default run: the short test sentences (clause pairs of the test verses)."""
    return _translation(root, "clauses.", "short test sentences: {n} clause pairs of the test verses", "**gap**",
                        "baseline: the source copied")


def _translation_epochs(root: Path) -> str:
    """Translation's validation loss and BLEU per epoch, mean of the runs: the pretrained start shows here."""
    report = Source(root, TRANSLATION)
    runs = translation_runs(report)
    curves = {v: (epoch_means(root, v, runs, "val_loss"), epoch_means(root, v, runs, "val_bleu")) for v in VARIANTS}
    epochs = len(curves[VARIANTS[0]][0])  # both variants train the same epochs
    rows = [[label, *(f"{x:.3f}" for x in curves[variant][0]), *(f"{x:.2f}" for x in curves[variant][1])]
            for variant, label in zip(VARIANTS, ("pretrained", "from scratch"))]
    header = [f"validation (mean of {len(runs)} runs)", *(f"loss, epoch {e}" for e in range(1, epochs + 1)),
              *(f"BLEU (greedy), epoch {e}" for e in range(1, epochs + 1))]
    return _table(header, rows)


def _translation_lab(root: Path) -> str:
    """The lab's sentences as the first pretraining run's models translate them, each with its sentence chrF; the
    last row: each variant's chrF over all the sentences, mean of the runs."""
    report = Source(root, TRANSLATION)
    run = translation_runs(report)[0]
    rows = [[row["source"], row["reference"],
             *(cell for v in VARIANTS for cell in (row[f"{v}_{run}"], f"{row[f'{v}_{run}_chrf']:.1f}"))]
            for row in report.get("lab.sentences")]
    rows.append([f"**all {report.count('lab.n_sentences')}, chrF (mean of {len(translation_runs(report))} runs)**", "",
                 *(cell for v in VARIANTS for cell in ("", f"**{report.number(f'lab.{v}_chrf_mean'):.1f}**"))])
    header = ["English", "reference", f"pretrained (run {run})", "chrF", f"scratch (run {run})", "chrF"]
    return _table(header, rows)


def _scaling(root: Path) -> str:
    """The scaling study per budget: pretraining tokens, the LM's perplexity, both accuracies, the gap."""
    summary = Source(root, SCALING)
    rows = []
    for i, _ in enumerate(summary.get("budgets")):
        at = f"budgets.{i}"
        gap = summary.number(f"{at}.gap")
        rows.append([f"{summary.number(f'{at}.budget'):g}x", tokens_text(summary.number(f"{at}.pretraining_tokens")),
                     f"{summary.number(f'{at}.lm_val_perplexity'):.1f}",
                     *(f"{summary.number(f'{at}.{v}_accuracy_mean'):.4f} ± {summary.number(f'{at}.{v}_accuracy_std'):.4f}"
                       for v in VARIANTS),
                     f"{_signed(gap, 4)} [{_signed(summary.number(f'{at}.gap_ci95_low'), 4)}, "
                     f"{_signed(summary.number(f'{at}.gap_ci95_high'), 4)}]",
                     _signed(summary.number(f"{at}.head_start"), 4), f"{summary.number(f'{at}.baseline_accuracy'):.4f}"])
    header = ["pretraining budget", "tokens (corpus + adaptation)", "LM val. perplexity",
              f"pretrained (mean ± std, {summary.count('budgets.0.n_seeds')} seeds)", "from scratch",
              "gap [95% CI]", "head start (epoch 1)", "TF-IDF baseline"]
    return _table(header, rows)


def _scaling_trend(root: Path) -> str:
    """The straight lines against log10(tokens), and where the pretrained one would reach the baseline."""
    summary = Source(root, SCALING)

    def fit(name: str, label: str) -> list[str]:
        low, high = summary.numbers(f"{name}.slope_ci95")
        return [label, f"{_signed(summary.number(f'{name}.slope_per_decade'), 4)} [{_signed(low, 4)}, "
                f"{_signed(high, 4)}]", f"{summary.number(f'{name}.r2'):.2f}"]

    def tokens(key: str) -> str:
        value = summary.get(f"baseline_reached.{key}")
        return "never" if value is None else tokens_text(finite(value, f"{SCALING}: baseline_reached.{key}"))

    target = summary.number("baseline_reached.target_accuracy")
    reach = [f"pretraining tokens at which the pretrained line reaches the baseline ({target:.4f})",
             f"{tokens('tokens')} [{tokens('tokens_at_steepest_slope')}, {tokens('tokens_at_shallowest_slope')}]",
             ""]
    rows = [fit("gap_fit", "gap (pretrained − scratch)")]
    if "slope_ci95_with_pretraining_spread" in summary.get("gap_fit"):
        low, high = summary.numbers("gap_fit.slope_ci95_with_pretraining_spread")
        spread = summary.number("pretraining_spread.sd")
        rows.append([f"gap, each point also ± one pretraining run's spread (sd {spread:.4f}, "
                     f"{summary.count('pretraining_spread.n_pretraining_runs')} runs at 1x)",
                     f"{_signed(summary.number('gap_fit.slope_per_decade'), 4)} [{_signed(low, 4)}, "
                     f"{_signed(high, 4)}]", ""])
    return _table(["fitted against log10(pretraining tokens)", "slope per 10x tokens [95% CI]", "R²"],
                  [*rows, fit("pretrained_accuracy_fit", "pretrained accuracy"), reach])


REFERENCES = "results/reference"


def _vendor_references(root: Path) -> str:
    """Each CPU vendor's committed reference (`lmtransfer results --save-reference`): its machine, the headline."""
    files = sorted((root / REFERENCES).glob("*.json"))
    if not files:
        raise MetricsError(f"{REFERENCES}/ holds no reference")
    rows = []
    for path in files:
        source = Source(root, f"{REFERENCES}/{path.name}")
        runs = f"{source.count('n_pretraining_runs')} × {source.count('n_finetuning_seeds')}"
        rows.append([f"{source.get('cpu_vendor')} ({source.get('cpu_model')})", runs,
                     f"{source.number('headline.pretrained'):.4f}", f"{source.number('headline.scratch'):.4f}",
                     f"{_signed(source.number('headline.gap'), 4)} [{_signed(source.number('headline.gap_low'), 4)}, "
                     f"{_signed(source.number('headline.gap_high'), 4)}]",
                     _joined(source.numbers("pretrained_per_run"), 4), _joined(source.numbers("scratch_per_run"), 4)])
    return _table(["CPU", "pretraining runs × fine-tuning seeds", "pretrained", "scratch", "gap [95% CI]",
                   "pretrained per run", "scratch per run"], rows)


@dataclass(frozen=True)
class Table:
    """A generator and the files it reads (named when a page's copy is stale)."""

    build: Callable[[Path], str]
    sources: tuple[str, ...]


TABLES: dict[str, Table] = {
    "classification-test": Table(_classification_test, (EVALUATE, BASELINE)),
    "classification-epochs": Table(_classification_epochs, (EVALUATE, BASELINE)),
    "course-test": Table(lambda root: _classification_test(root, COURSE, "reviews"),
                         (COURSE + EVALUATE, COURSE + BASELINE)),
    "course-epochs": Table(lambda root: _classification_epochs(root, COURSE), (COURSE + EVALUATE, COURSE + BASELINE)),
    "objectives": Table(_objectives, ("results/objectives/",)),
    "translation-test": Table(_translation_test, (TRANSLATION,)),
    "translation-clauses": Table(_translation_clauses, (TRANSLATION,)),
    "translation-epochs": Table(_translation_epochs, (TRANSLATION, f"{(TRANSLATION_ROOT / FINETUNE_METRICS).as_posix()}/")),
    "translation-lab": Table(_translation_lab, (TRANSLATION,)),
    "scaling": Table(_scaling, (SCALING,)),
    "scaling-trend": Table(_scaling_trend, (SCALING,)),
    "vendor-references": Table(_vendor_references, (f"{REFERENCES}/",)),
    "environment": Table(lambda root: knobs.markdown_table() + "\n", ("src/lmtransfer/core/knobs.py",)),
}
for _name, _run in RESULT_RUNS.items():  # each committed run's test table, and its label curve's (`ResultRun`)
    TABLES[f"{_name}-test"] = Table(partial(_classification_test, folder=_run.folder, texts=_run.texts),
                                    (_run.folder + EVALUATE, _run.folder + BASELINE))
    if _run.label_curve:
        TABLES[f"{_name}-labels"] = Table(partial(_label_curve, folder=_run.folder),
                                          (_run.folder + LABEL_CURVE, _run.folder + EVALUATE))




def _benchmark_cell(value: Any, spec: str, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.replace("|", "\\|")  # a bar in a message would end the cell
    return format(finite(value, where), spec or "g")


def _benchmark(root: Path, name: str) -> str:
    """The table a benchmark wrote (`benchmarks/results_file.py`), under a line naming the command, the machine
    and what else the run reported."""
    source = Source(root, f"{BENCHMARK_RESULTS}/{name}.json")
    columns, machine = source.get("columns"), source.get("machine")
    rows = [[_benchmark_cell(value, column.get("format", ""), f"{source.rel}: rows[{i}] {column['name']!r}")
             for value, column in zip(row, columns)] for i, row in enumerate(source.get("rows"))]
    cores = f", {machine['cores']} cores" if machine.get("cores") else ""
    kernels = f", {machine['cpu_capability']}" if machine.get("cpu_capability") else ""
    kernels += f", {machine['gpu']}" if machine.get("gpu") else ""
    notes = f"; {source.get('notes')}" if source.get("notes") else ""
    at = f" at {source.get('code')}" if source.get("code") else ""
    caption = (f"`{source.get('command')}`{at} on {machine.get('cpu', 'an unnamed CPU')}{cores}{kernels}: "
               f"{source.number('seconds'):,.0f} s{notes}.")
    return caption + "\n\n" + _table([column["name"] for column in columns], rows)


def _sources(name: str) -> tuple[str, ...]:
    """The files table NAME is generated from."""
    if name.startswith(BENCHMARK):
        return (f"{BENCHMARK_RESULTS}/{name.removeprefix(BENCHMARK)}.json",)
    return TABLES[name].sources


def generate(name: str, root: Path) -> str:
    """The Markdown table NAME, from the metrics files under `root`, ending with a newline."""
    if name.startswith(BENCHMARK):
        return _benchmark(Path(root), name.removeprefix(BENCHMARK))
    if name not in TABLES:
        raise UnknownTable(name)
    return TABLES[name].build(Path(root))


# --- the pages --------------------------------------------------------------------------------------------------


def pages(root: Path) -> list[Path]:
    """README.md, then docs/**/*.md in path order: the order problems are reported in."""
    root = Path(root)
    readme = [root / "README.md"] if (root / "README.md").is_file() else []
    docs = sorted((path for path in (root / "docs").rglob("*.md") if path.is_file()),
                  key=lambda path: path.relative_to(root).as_posix())
    return readme + docs


def _unfenced(lines: list[str]) -> Iterator[int]:
    """The index of each line outside fenced code (the fences themselves excluded)."""
    fence = ""
    for index, line in enumerate(lines):
        opening = FENCE.match(line)
        if opening and not fence:
            fence = opening.group(1)
        elif opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
            fence = ""
        elif not fence:
            yield index


def _markers(lines: list[str]) -> Iterator[tuple[int, re.Match[str] | None]]:
    """Each marker line outside fenced code, with None for a line that looks like a marker but is malformed."""
    for index in _unfenced(lines):
        if MARKER_LIKE.match(lines[index]):
            yield index, MARKER.match(lines[index])


def _prose(lines: list[str], blocks: list[_Block]) -> list[int]:
    """The lines a value marker may stand on: outside fenced code and outside the generated tables."""
    generated = {index for block in blocks for index in range(block.start, block.end + 1)}
    return [index for index in _unfenced(lines) if index not in generated]


@dataclass(frozen=True)
class _Block:
    name: str
    start: int  # index of the start marker's line
    end: int


def _scan(lines: list[str]) -> tuple[list[_Block], list[tuple[int, str]]]:
    """The marker pairs, and (1-based line, problem) for each malformed or unpaired marker."""
    blocks: list[_Block] = []
    problems: list[tuple[int, str]] = []
    opened: tuple[str, int] | None = None
    for index, marker in _markers(lines):
        if marker is None:
            problems.append((index + 1, "malformed marker: expected `<!-- report:NAME:start -->` or `...:end -->`"))
        elif marker["kind"] == "start":
            if opened:
                problems.append((opened[1] + 1, f"table {opened[0]!r}: start marker without an end marker"))
            opened = (marker["name"], index)
        elif opened and opened[0] == marker["name"]:
            blocks.append(_Block(marker["name"], opened[1], index))
            opened = None
        else:
            problems.append((index + 1, f"table {marker['name']!r}: end marker without a start marker"))
    if opened:
        problems.append((opened[1] + 1, f"table {opened[0]!r}: start marker without an end marker"))
    return blocks, problems


def _generated(name: str, root: Path, cache: dict[str, str | Exception]) -> str | Exception:
    """generate(), with its error as a value, once per name and run."""
    if name not in cache:
        try:
            cache[name] = generate(name, root)
        except (UnknownTable, MetricsError) as error:
            cache[name] = error
    return cache[name]


@dataclass
class _Page:
    path: Path
    rel: str
    text: str
    fresh: str = ""  # the text with every table that can be generated regenerated
    stale: list[tuple[int, str]] = field(default_factory=list)  # write_pages fixes these
    broken: list[tuple[int, str]] = field(default_factory=list)  # it cannot


def _read_page(path: Path, root: Path, cache: dict[str, str | Exception], reader: values.Reader) -> _Page:
    """A page, its regenerated text, and what is stale or broken in it: its values first (they change no line
    count, so every problem names the line as the page has it), then its tables."""
    page = _Page(path, path.relative_to(root).as_posix(), "")
    try:
        page.text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        page.broken.append((1, f"not UTF-8 text ({error.reason})"))
        return page
    newline = "\r\n" if "\r\n" in page.text else "\n"
    lines = page.text.split(newline)
    blocks, page.broken = _scan(lines)
    page.stale, broken = values.refresh(lines, _prose(lines, blocks), root, reader)
    page.broken += broken
    for block in reversed(blocks):  # from the end, so the earlier blocks' line numbers hold
        made = _generated(block.name, root, cache)
        if isinstance(made, Exception):
            why = str(made) if isinstance(made, UnknownTable) else f"table {block.name!r} cannot be generated: {made}"
            page.broken.append((block.start + 1, why))
            continue
        body = ["", *made.rstrip("\n").split("\n"), ""]
        if lines[block.start + 1:block.end] != body:
            page.stale.append((block.start + 1, f"table {block.name!r} differs from what "
                                                f"{named_files(_sources(block.name))}; run `{REGENERATE}`"))
            lines[block.start + 1:block.end] = body
    page.fresh = newline.join(lines)
    return page


def _listed(page: _Page, found: list[tuple[int, str]]) -> list[str]:
    return [f"{page.rel}:{line}: {problem}" for line, problem in sorted(found)]


def check_pages(root: Path) -> list[str]:
    """Every stale table or value and broken marker, as `file:line: problem`, in page and line order; [] when all
    fresh."""
    root, cache = Path(root), {}
    reader = values.Reader(root)
    problems: list[str] = []
    for path in pages(root):
        page = _read_page(path, root, cache, reader)
        problems += _listed(page, page.stale + page.broken)
    return problems


def write_pages(root: Path) -> list[Path]:
    """Regenerate every marked table and value; returns the files changed. Nothing is written while any marker is
    broken or any table or value cannot be generated (PagesError lists them): a half-regenerated docs tree helps no
    one."""
    root, cache = Path(root), {}
    reader = values.Reader(root)
    read = [_read_page(path, root, cache, reader) for path in pages(root)]
    broken = [problem for page in read for problem in _listed(page, page.broken)]
    if broken:
        raise PagesError(broken)
    changed = [page for page in read if page.fresh != page.text]
    for page in changed:
        page.path.write_bytes(page.fresh.encode("utf-8"))
    return [page.path for page in changed]


def main(argv: list[str] | None = None) -> int:
    """`lmtransfer report [--check]`: rewrite the tables and values, or exit 1 naming the first stale or broken one."""
    parser = argparse.ArgumentParser(prog="lmtransfer report", description="Regenerate the results tables and the "
                                     "stated values of README.md and docs/**/*.md.")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a table or value is stale or broken")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: here)")
    args = parser.parse_args(argv)
    try:
        problems = check_pages(args.root) if args.check else []
        changed = [] if args.check else write_pages(args.root)
    except PagesError as error:
        problems = error.problems
    if problems:
        print(problems[0], file=sys.stderr)
        print(f"{len(problems)} problem(s) in the generated tables and values in all", file=sys.stderr)
        return 1
    for path in changed:
        print(f"{path.relative_to(args.root).as_posix()}: tables and values regenerated")
    if not changed:
        print("the generated tables and values are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
