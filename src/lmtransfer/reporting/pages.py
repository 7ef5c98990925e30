"""The results tables of README.md and docs/**/*.md, generated from the committed result files: each between
`<!-- report:KIND@FOLDER:start -->` and `<!-- report:KIND@FOLDER:end -->` lines (not in fenced code)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from lmtransfer.core import knobs
from lmtransfer.core.io import read_tsv
from lmtransfer.core.paths import VARIANTS

MARKER = re.compile(r"^\s*<!--\s*report:(?P<name>\S+?):(?P<kind>start|end)\s*-->\s*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")
LABELS = ("pretrained, then fine-tuned", "same network from scratch")
# docs figure -> (the pipeline's folder, its plot): a byte copy of the plot its dvc.lock records
FIGURES = {
    "docs/figures/finetune_accuracy.png": (".", "plots/finetune_accuracy.png"),
    "docs/figures/course_finetune_accuracy.png": ("results/course", "plots/finetune_accuracy.png"),
    "docs/figures/translation_finetune_bleu.png": ("translation", "plots/finetune_bleu.png"),
    "docs/figures/translation_test_scores.png": ("translation", "plots/test_scores.png"),
}


class MetricsError(ValueError):
    """A result file missing or without the value a table needs (the message names the file and the key)."""


def finite(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MetricsError(f"{where} is {value!r}, not a finite number")
    return value


class Result:
    """One JSON result file; `result("gap.ci95_low")` is a finite number or a MetricsError naming file and key."""

    def __init__(self, root: Path, rel: str, data: Any = None) -> None:
        self.rel = rel
        if data is None:
            try:
                data = json.loads((root / rel).read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise MetricsError(f"{rel} cannot be read ({error})") from None
        self.data = data

    def get(self, key: str) -> Any:
        node = self.data
        for part in key.split("."):
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise MetricsError(f"{self.rel} has no {key!r}") from None
        return node

    def __call__(self, key: str) -> float:
        return finite(self.get(key), f"{self.rel}: {key!r}")

    def list(self, key: str) -> list[float]:
        return [self(f"{key}.{i}") for i in range(len(self.get(key)))]


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines) + "\n"


def _p(p: float, digits: int = 4) -> str:
    """A p-value at the test's resolution: `p < 0.0001`, never `p = 0.0000`."""
    return f"p < {10**-digits:.{digits}f}" if p < 10**-digits / 2 else f"p = {p:.{digits}f}"


def _gap(r: Result, at: str, metric: str = "", digits: int = 4, p_digits: int = 4) -> str:
    """`+0.0326 [+0.0177, +0.0486], p = 0.0002` (`metric`: bleu, chrf; "" for accuracy)."""
    pre = f"{at}.{metric}_" if metric else f"{at}."
    mean, low, high = r(f"{at}.{metric or 'accuracy'}_mean"), r(f"{pre}ci95_low"), r(f"{pre}ci95_high")
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}], {_p(r(f'{pre}p_value'), p_digits)}"


def _mean_std(r: Result, at: str, digits: int = 4) -> str:
    return f"{r(f'{at}_mean'):.{digits}f} ± {r(f'{at}_std'):.{digits}f}"


def classification_test(root: Path, folder: str) -> str:
    """Test accuracy and macro-F1 per variant, the gap, each source's share of its variance, the baseline."""
    r = Result(root, f"{folder}/evaluate.json")
    best = max(r(f"{v}.accuracy_mean") for v in VARIANTS)
    bold = {v: "**" if r(f"{v}.accuracy_mean") == best else "" for v in VARIANTS}
    rows = [[label, f"{bold[v]}{_mean_std(r, f'{v}.accuracy')}{bold[v]}",
             ", ".join(f"{x:.4f}" for x in r.list(f"{v}.accuracy_per_seed")), _mean_std(r, f"{v}.macro_f1")]
            for v, label in zip(VARIANTS, LABELS)]
    sources = [("pretraining runs", "pretraining_runs")] * (r("n_pretraining_runs") > 1)
    sources += [("fine-tuning seeds", "finetuning_seeds")] * (r("n_finetuning_seeds") > 1)
    sources += [("test texts", "test_examples")]
    shares = ", ".join(f"{label} {r(f'gap.share.{key}'):.0%}" for label, key in sources)
    rows += [["**gap** (pretrained − scratch)", f"**{_gap(r, 'gap')}**", "", f"{r('gap.macro_f1_mean'):+.4f}"],
             ["the gap's variance, each source resampled alone", shares, "", ""],
             ["TF-IDF + logistic regression (baseline stage)", f"{r('baseline.accuracy'):.4f}", "(deterministic)",
              f"{r('baseline.macro_f1'):.4f}"]]
    runs, seeds = int(r("n_pretraining_runs")), int(r("n_finetuning_seeds"))
    design = f"{runs} pretraining run{'s' * (runs != 1)} × {seeds} fine-tuning seed{'s' * (seeds != 1)}"
    return _table([f"test set, {int(r('n_test_examples')):,} texts", f"accuracy (mean ± std, {design})", "per run",
                   "macro-F1"], rows)


def classification_epochs(root: Path, folder: str) -> str:
    """Validation accuracy per epoch (mean of the runs), the first epoch's per run: the head start."""
    r = Result(root, f"{folder}/evaluate.json")
    curves = {v: r.list(f"{v}.val_accuracy_mean_per_epoch") for v in VARIANTS}
    first = {v: ", ".join(f"{x:.4f}" for x in r.list(f"{v}.first_epoch_val_accuracy_per_seed")) for v in VARIANTS}
    rows = [[v, f"{curves[v][0]:.4f} ({first[v]})", *(f"{x:.4f}" for x in curves[v][1:])] for v in VARIANTS]
    rows.append(["gap", *(f"{p - s:+.4f}" for p, s in zip(*curves.values()))])
    rows.append(["TF-IDF baseline", f"{r('baseline.valid_accuracy'):.4f}", *[""] * (len(curves["scratch"]) - 1)])
    return _table([f"validation accuracy (mean of {int(r('n_seeds'))} runs)",
                   *(f"epoch {e}" for e in range(1, len(curves["scratch"]) + 1))], rows)


def label_curve(root: Path, folder: str) -> str:
    """Test accuracy per number of labeled examples, the gap, TF-IDF on the same examples."""
    rel = f"{folder}/evaluate/label_curve.tsv"
    try:
        rows = read_tsv(root / rel)
    except OSError as error:
        raise MetricsError(f"{rel} cannot be read ({error})") from None
    cells = []
    for i, row in enumerate(rows):
        r = Result(root, f"{rel}, row {i + 1}", {k: v if k == "labels" else float(v) for k, v in row.items()})
        size = f"{r('n_train'):,.0f}"
        cells.append([f"all ({size})" if row["labels"] == "all" else size,
                      *(f"{r(v):.4f} ± {r(f'{v}_std'):.4f}" for v in VARIANTS),
                      f"{r('gap'):+.4f} [{r('gap_low'):+.4f}, {r('gap_high'):+.4f}], {_p(r('p_value'))}",
                      f"{r('baseline'):.4f}"])
    return _table(["labeled training examples", "pretrained (mean ± std)", "from scratch", "gap [95% CI], p",
                   "TF-IDF on the same examples"], cells)


def run_record(root: Path, folder: str) -> str:
    r = Result(root, f"{folder}/run.json")
    machine = r.get("machine")
    return (f"`{r.get('command')}` at {r.get('code')}, on a {machine['cores']}-core {machine['cpu']}: "
            f"{r('seconds') / 60:,.0f} min.\n")


OBJECTIVES = (("`clm`", "clm"), ("`mlm`", "mlm"), ("`mlm` + NSP", "mlm-nsp"))


def objectives(root: Path, folder: str) -> str:
    """One row per pretraining objective (FOLDER/<objective>/evaluate.json)."""
    rows = []
    for label, name in OBJECTIVES:
        r = Result(root, f"{folder}/{name}/evaluate.json")
        rows.append([label, f"{r('pretraining.val_perplexity'):.1f}",
                     " vs ".join(f"{r(f'{v}.val_accuracy_mean_per_epoch.0'):.4f}" for v in VARIANTS),
                     *(_mean_std(r, f"{v}.accuracy") for v in VARIANTS), _gap(r, "gap")])
    return _table(["objective", "LM validation perplexity", "epoch-1 validation, pretrained vs scratch",
                   "test, pretrained", "test, scratch", "gap [95% CI], p"], rows)


def translation_test(root: Path, folder: str, part: str = "") -> str:
    """Test BLEU and chrF per variant, the gap, the source copied (`part` "clauses.": the short test pairs)."""
    r = Result(root, f"{folder}/evaluate.json")
    rows = [[label, *(f"{_mean_std(r, f'{part}{v}.{m}', 2)} [{r(f'{part}{v}.{m}_ci95_low'):.2f}, "
                      f"{r(f'{part}{v}.{m}_ci95_high'):.2f}]" for m in ("bleu", "chrf"))]
            for v, label in zip(VARIANTS, LABELS)]
    rows.append(["**gap** (pretrained − scratch)", *(_gap(r, f"{part}gap", m, 2, 3) for m in ("bleu", "chrf"))])
    rows.append(["the source copied", *(f"{r(f'{part}baseline.copy_source_{m}'):.2f}" for m in ("bleu", "chrf"))])
    what = "clause pairs of the test verses" if part else "verses"
    return _table([f"test set, {int(r(f'{part}n_test_sentences')):,} {what}", "BLEU", "chrF"], rows)


def translation_epochs(root: Path, folder: str) -> str:
    runs = Result(root, f"{folder}/evaluate.json").get("runs")
    rows = []
    for v in VARIANTS:
        logs = [read_tsv(root / f"{folder}/finetune/{v}/seed{run}.tsv") for run in runs]
        means = {c: [sum(float(log[e][c]) for log in logs) / len(logs) for e in range(len(logs[0]))]
                 for c in ("val_loss", "val_bleu")}
        rows.append([v, *(f"{x:.3f}" for x in means["val_loss"]), *(f"{x:.2f}" for x in means["val_bleu"])])
    epochs = range(1, (len(rows[0]) - 1) // 2 + 1)
    return _table([f"validation (mean of {len(runs)} runs)", *(f"loss, epoch {e}" for e in epochs),
                   *(f"BLEU, epoch {e}" for e in epochs)], rows)


def translation_lab(root: Path, folder: str) -> str:
    """The lab's sentences as the first run's models translate them, each with its chrF."""
    r = Result(root, f"{folder}/evaluate.json")
    run = r.get("runs")[0]
    rows = [[row["source"], row["reference"],
             *(c for v in VARIANTS for c in (row[f"{v}_{run}"], f"{row[f'{v}_{run}_chrf']:.1f}"))]
            for row in r.get("lab.sentences")]
    rows.append([f"**all {int(r('lab.n_sentences'))}, chrF (mean of the runs)**", "",
                 *(c for v in VARIANTS for c in ("", f"**{r(f'lab.{v}_chrf_mean'):.1f}**"))])
    return _table(["English", "reference", f"pretrained (run {run})", "chrF", f"scratch (run {run})", "chrF"], rows)


def _tokens(n: float) -> str:
    return f"{n / 1e6:,.2f}M" if n >= 1e5 else f"{n:,.0f}"


def scaling(root: Path, folder: str) -> str:
    """The scaling study per budget (FOLDER/summary.json)."""
    r = Result(root, f"{folder}/summary.json")
    rows = []
    for b in (f"budgets.{i}" for i in range(len(r.get("budgets")))):
        rows.append([f"{r(f'{b}.budget'):g}x", _tokens(r(f"{b}.pretraining_tokens")),
                     f"{r(f'{b}.lm_val_perplexity'):.1f}", *(_mean_std(r, f"{b}.{v}_accuracy") for v in VARIANTS),
                     f"{r(f'{b}.gap'):+.4f} [{r(f'{b}.gap_ci95_low'):+.4f}, {r(f'{b}.gap_ci95_high'):+.4f}]",
                     f"{r(f'{b}.head_start'):+.4f}", f"{r(f'{b}.baseline_accuracy'):.4f}"])
    return _table(["pretraining budget", "tokens (corpus + adaptation)", "LM val. perplexity", "pretrained",
                   "from scratch", "gap [95% CI]", "head start (epoch 1)", "TF-IDF baseline"], rows)


def scaling_trend(root: Path, folder: str) -> str:
    """The straight-line fits against log10(tokens), and where the pretrained line reaches the baseline."""
    r = Result(root, f"{folder}/summary.json")

    def fit(name: str, label: str) -> list[str]:
        low, high = r.list(f"{name}.slope_ci95")
        return [label, f"{r(f'{name}.slope_per_decade'):+.4f} [{low:+.4f}, {high:+.4f}]", f"{r(f'{name}.r2'):.2f}"]

    def tokens(key: str) -> str:
        return "never" if r.get(f"baseline_reached.{key}") is None else _tokens(r(f"baseline_reached.{key}"))

    reach = (f"{tokens('tokens')} [{tokens('tokens_at_steepest_slope')}, {tokens('tokens_at_shallowest_slope')}]")
    return _table(["fitted against log10(pretraining tokens)", "slope per 10x tokens [95% CI]", "R²"],
                  [fit("gap_fit", "gap (pretrained − scratch)"), fit("pretrained_accuracy_fit", "pretrained accuracy"),
                   [f"tokens at which the pretrained line reaches the baseline "
                    f"({r('baseline_reached.target_accuracy'):.4f})", reach, ""]])


def benchmark(root: Path, name: str) -> str:
    """The table a benchmark wrote (benchmarks/results/NAME.json), under a line naming its command and machine."""
    r = Result(root, f"benchmarks/results/{name}.json")
    columns, machine = r.get("columns"), r.get("machine")

    def cell(value: Any, column: dict, where: str) -> str:
        if value is None or isinstance(value, str):
            return (value or "").replace("|", "\\|")  # a bar in a message would end the cell
        return format(finite(value, f"{r.rel}: {where}"), column.get("format") or "g")

    rows = [[cell(value, column, f"rows[{i}] {column['name']!r}") for value, column in zip(row, columns)]
            for i, row in enumerate(r.get("rows"))]
    at = f" at {r.get('code')}" if r.data.get("code") else ""
    notes = f"; {r.get('notes')}" if r.data.get("notes") else ""
    caption = (f"`{r.get('command')}`{at} on {machine.get('cpu', 'an unnamed CPU')}"
               f"{', ' + str(machine['cores']) + ' cores' if machine.get('cores') else ''}"
               f"{', ' + machine['gpu'] if machine.get('gpu') else ''}: {r('seconds'):,.0f} s{notes}.")
    return caption + "\n\n" + _table([column["name"] for column in columns], rows)


KINDS: dict[str, Callable[[Path, str], str]] = {
    "test": classification_test, "epochs": classification_epochs, "labels": label_curve, "run": run_record,
    "objectives": objectives, "translation": translation_test,
    "translation-clauses": lambda root, folder: translation_test(root, folder, "clauses."),
    "translation-epochs": translation_epochs, "translation-lab": translation_lab, "scaling": scaling,
    "scaling-trend": scaling_trend, "bench": benchmark, "environment": lambda root, _: knobs.markdown_table() + "\n",
}


def generate(name: str, root: Path) -> str:
    kind, _, folder = name.partition("@")
    if kind not in KINDS:
        raise MetricsError(f"unknown table {name!r}: KIND@FOLDER with KIND one of {', '.join(KINDS)}")
    return KINDS[kind](Path(root), folder)


def pages(root: Path) -> list[Path]:
    return [path for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))] if path.is_file()]


def refresh(path: Path, root: Path) -> tuple[str, list[str], list[str]]:
    """The page with every table regenerated, and `page:line: problem` for each stale and each broken table."""
    rel, lines = path.relative_to(root).as_posix(), path.read_text(encoding="utf-8").split("\n")
    out, stale, broken = [], [], []
    fenced, opened, body = False, None, []
    for number, line in enumerate(lines, start=1):
        if FENCE.match(line):
            fenced = not fenced
        marker = None if fenced else MARKER.match(line)
        if opened is None:
            out.append(line)
            if marker and marker["kind"] == "start":
                opened, body = (marker["name"], number), []
            elif marker:
                broken.append(f"{rel}:{number}: end marker of {marker['name']!r} without a start marker")
            continue
        if not (marker and marker["kind"] == "end" and marker["name"] == opened[0]):
            body.append(line)
            continue
        (name, start), opened = opened, None
        try:
            fresh = ["", *generate(name, root).rstrip("\n").split("\n"), ""]
        except MetricsError as error:
            broken.append(f"{rel}:{start}: table {name!r} cannot be generated: {error}")
            fresh = body
        if fresh != body:
            stale.append(f"{rel}:{start}: table {name!r} differs from what its files give; run `lmtransfer report`")
        out += [*fresh, line]
    if opened:
        broken.append(f"{rel}:{opened[1]}: start marker of {opened[0]!r} without an end marker")
        out += body
    return "\n".join(out), stale, broken


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def locked_md5(root: Path, folder: str, plot: str) -> str | None:
    lock = root / folder / "dvc.lock"
    stages = (YAML(typ="safe").load(lock.read_text(encoding="utf-8")) or {}).get("stages", {}) if lock.is_file() else {}
    outs = [out for stage in stages.values() for out in stage.get("outs", [])]
    return next((out.get("md5") for out in outs if out.get("path") == plot), None)


def check_pages(root: Path) -> list[str]:
    """Each stale or broken table, and each docs figure that is not the plot its pipeline's dvc.lock records."""
    root = Path(root)
    problems = [problem for path in pages(root) for problem in sum(refresh(path, root)[1:], [])]
    for figure, (folder, plot) in FIGURES.items():
        if not (root / figure).is_file() or _md5(root / figure) != locked_md5(root, folder, plot):
            problems.append(f"{figure}: not the {folder}/{plot} that {folder}/dvc.lock records; copy it with "
                            "`lmtransfer report` after the pipeline")
    return problems


def write_pages(root: Path) -> list[str]:
    """Regenerate every table and copy each plot its dvc.lock records over its docs figure; nothing is written
    while a table is broken."""
    root = Path(root)
    fresh = {path: refresh(path, root) for path in pages(root)}
    broken = [problem for _, _, problems in fresh.values() for problem in problems]
    if broken:
        raise MetricsError(f"{broken[0]} ({len(broken)} broken table(s) in all)")
    changed = []
    for path, (text, stale, _) in fresh.items():
        if stale:
            path.write_text(text, encoding="utf-8")
            changed.append(path.relative_to(root).as_posix())
    for figure, (folder, plot) in FIGURES.items():
        source, target = root / folder / plot, root / figure
        if source.is_file() and _md5(source) == locked_md5(root, folder, plot) != (target.is_file() and _md5(target)):
            shutil.copyfile(source, target)
            changed.append(figure)
    return changed
