"""The experiments DVC knows (the workspace, its commit, each `dvc exp run` from it) with their params and reports,
and `lmtransfer compare`: them side by side on the transfer question, uncertainty kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmtransfer.core.errors import LmtransferError
from lmtransfer.core.paths import EVALUATE_REPORT, PARAMS, VARIANTS
from lmtransfer.harness.tracking import flatten
from lmtransfer.reporting.plots import COLORS, plt, save_figure


@dataclass
class Experiment:
    name: str  # "workspace", the commit's branch or short rev, or the experiment's name
    rev: str
    params: dict[str, Any]  # params.yaml, flat: {"finetune.lr": 0.0005, ...}
    report: dict | None  # metrics/evaluate.json at that revision; None when it has none (queued, failed)


def dvc_env() -> dict[str, str]:
    """dvc as the stages run it: this interpreter's folder first on PATH."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def dvc_output(root: Path, *args: str) -> str:
    done = subprocess.run(["dvc", *args], cwd=root, env=dvc_env(), text=True, capture_output=True)
    if done.returncode:
        raise LmtransferError(f"`dvc {' '.join(args)}` failed in {root}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def _params_of(entry: dict) -> dict[str, Any]:
    files = (entry.get("data") or {}).get("params") or {}
    return flatten((files.get(str(PARAMS)) or {}).get("data") or {})


def _report_at(root: Path, rev: str) -> dict | None:
    if rev == "workspace":
        path = root / EVALUATE_REPORT
        return json.loads(path.read_text()) if path.is_file() else None
    import dvc.api

    try:
        return json.loads(dvc.api.read(str(EVALUATE_REPORT), repo=str(root), rev=rev))
    except Exception:  # noqa: BLE001 - an experiment without the file (failed before evaluate) has no report
        return None


def _entries(shown: list[dict]):
    """(name, rev, entry) of each baseline and each finished experiment of `dvc exp show --json`."""
    for baseline in shown:
        rev = baseline["rev"]
        yield (baseline.get("name") or (rev if rev == "workspace" else rev[:7])), rev, baseline
        for experiment in baseline.get("experiments") or []:
            executor = experiment.get("executor") or {}
            if executor.get("state", "success") != "success":  # queued, running or failed: no results of its own
                continue
            for run in experiment.get("revs") or []:
                yield (run.get("name") or experiment.get("name") or run["rev"][:7]), run["rev"], run


def list_experiments(root: Path = Path("."), prefix: str = "", rev: str | None = None) -> list[Experiment]:
    """Every experiment of the current commit (or `rev`) named `prefix`*, the workspace first unless it holds nothing
    new."""
    shown = json.loads(dvc_output(root, "exp", "show", "--json", *(["--rev", rev] if rev else [])))
    found = [Experiment(name, rev, _params_of(entry), _report_at(root, rev)) for name, rev, entry in _entries(shown)]
    if len(found) > 1 and found[0].rev == "workspace" and (found[0].params, found[0].report) == (
            found[1].params, found[1].report):
        found = found[1:]
    return [e for e in found if e.name.startswith(prefix)] if prefix else found


def changed_params(experiments: list[Experiment]) -> list[str]:
    keys: list[str] = []
    for experiment in experiments:
        keys += [key for key in experiment.params if key not in keys]
    return [key for key in keys if len({json.dumps(e.params.get(key)) for e in experiments}) > 1]


@dataclass
class Row:
    name: str
    params: dict[str, Any]
    pretrained: tuple[float, float]  # test accuracy: mean, std over seeds
    scratch: tuple[float, float]
    gap: tuple[float, float, float]  # mean, 95% interval low, high
    p_value: float
    head_start: float
    baseline: float
    seeds: int

    @classmethod
    def of(cls, experiment: Experiment) -> Row:
        report = experiment.report
        gap = report["gap"]
        return cls(experiment.name, experiment.params,
                   *((report[v]["accuracy_mean"], report[v]["accuracy_std"]) for v in VARIANTS),
                   (gap["accuracy_mean"], gap["ci95_low"], gap["ci95_high"]), gap["p_value"],
                   gap["first_epoch_val_accuracy_mean"], report["baseline"]["accuracy"], report["n_seeds"])


def compare_rows(experiments: list[Experiment], by: str | None = None) -> tuple[list[Row], list[str]]:
    """The rows of the experiments with results (ordered by `by`) and the params shown."""
    done = [e for e in experiments if e.report is not None]
    if not done:
        raise LmtransferError("no experiment has results yet: run the pipeline (`make run`) or `dvc exp run`")
    if by is not None:
        missing = [e.name for e in done if by not in e.params]
        if missing:
            raise LmtransferError(f"--by {by}: not a key of params.yaml in {', '.join(missing)} (keys look like "
                                  "finetune.lr, model.n_layers)")
        done.sort(key=lambda e: (_sortable(e.params[by]), e.name))
    shown = changed_params(done)
    if by is not None and by not in shown:
        shown.insert(0, by)
    return [Row.of(e) for e in done], shown


def format_table(rows: list[Row], shown: list[str]) -> str:
    """One line per experiment, within 120 columns for two or three changed params."""
    names = _short_names(shown)
    baselines = sorted({row.baseline for row in rows})
    header = ["experiment", *names.values(), "pretrained", "scratch", "gap [95% CI]", "p", "head start"]
    lines = [[row.name, *(_cell(row.params.get(key)) for key in shown), _spread(row.pretrained),
              _spread(row.scratch), f"{row.gap[0]:+.3f} [{row.gap[1]:+.3f}, {row.gap[2]:+.3f}]",
              "<0.001" if row.p_value < 0.001 else f"{row.p_value:.3f}", f"{row.head_start:+.3f}"] for row in rows]
    if len(baselines) > 1:
        header.append("baseline")
        for line, row in zip(lines, rows):
            line.append(f"{row.baseline:.3f}")
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header))]
    text = ["  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip()
            for line in [header, *lines]]
    seeds = "/".join(map(str, sorted({row.seeds for row in rows})))
    baseline = ("baseline = TF-IDF + logistic regression" if len(baselines) > 1 else
                f"baseline (TF-IDF + logistic regression) {baselines[0]:.3f} in every experiment")
    note = [f"test accuracy, mean ± std over {seeds} runs (pretraining runs x fine-tuning seeds); gap = pretrained "
            "- scratch with the 95% interval and p of a bootstrap over runs, seeds and test sentences; head start = "
            f"the gap in validation accuracy after epoch 1; {baseline}"]
    renamed = [f"{short} = {key}" for key, short in names.items() if short != key]
    if renamed:
        note.append("params: " + ", ".join(renamed))
    return "\n".join([*text, "", *(textwrap.fill(line, width=100) for line in note)])


def _sortable(value: Any) -> tuple:
    return (0, float(value), "") if isinstance(value, (int, float)) else (1, 0.0, str(value))


def _short_names(keys: list[str]) -> dict[str, str]:
    """`finetune.lr` shown as `lr`, unless two shown keys end alike."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return {key: short if last.count(short) == 1 else key for key, short in zip(keys, last)}


def _spread(mean_std: tuple[float, float]) -> str:
    return f"{mean_std[0]:.3f} ± {mean_std[1]:.3f}"


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def transfer_figure(xs: list[float], rows: list[Row], xlabel: str):
    """Above, both variants' test accuracy and the baseline; below, the gap with its 95% interval."""
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 7), sharex=True, height_ratios=(3, 2))
    seeds = "/".join(map(str, sorted({row.seeds for row in rows})))
    for variant in VARIANTS:
        means, stds = zip(*(getattr(row, variant) for row in rows))
        top.errorbar(xs, means, yerr=stds, fmt="o-", capsize=4, color=COLORS[variant],
                     label=f"{variant} (mean ± std over {seeds} seeds)")
    baselines = sorted({row.baseline for row in rows})
    top.axhline(baselines[-1], color="gray", linestyle="--",
                label="TF-IDF baseline" if len(baselines) == 1 else "TF-IDF baseline (highest)")
    top.set_ylabel("test accuracy")
    gaps = [row.gap[0] for row in rows]
    errors = [[g - row.gap[1] for g, row in zip(gaps, rows)], [row.gap[2] - g for g, row in zip(gaps, rows)]]
    bottom.errorbar(xs, gaps, yerr=errors, fmt="s-", capsize=4, color="tab:green", label="gap (95% CI)")
    bottom.axhline(0, color="black", linewidth=0.8)
    bottom.set_ylabel("pretrained - scratch")
    bottom.set_xlabel(xlabel)
    return figure, top, bottom


def plot_by(rows: list[Row], by: str, path: Path, dpi: int = 120) -> Path:
    values = [row.params[by] for row in rows]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    xs = [float(v) for v in values] if numeric else list(range(len(rows)))
    figure, top, bottom = transfer_figure(xs, rows, by)
    if numeric and min(xs) > 0 and max(xs) / min(xs) >= 10:
        bottom.set_xscale("log")
    if not numeric:
        bottom.set_xticks(xs, [str(v) for v in values])
    top.legend(fontsize=8)
    bottom.legend(fontsize=8)
    top.set_title(f"transfer against {by} ({len(rows)} experiments)")
    return save_figure(figure, path, dpi)
