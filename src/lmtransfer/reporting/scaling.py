"""`lmtransfer scaling`: the pipeline at several pretraining budgets, one queued DVC experiment each; the summary
fits the gap and the pretrained accuracy against log10(tokens) and says where that line would reach the baseline."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
from scipy import stats

from lmtransfer.core.config import PretrainParams
from lmtransfer.core.errors import LmtransferError
from lmtransfer.core.io import write_json
from lmtransfer.reporting.experiments import Experiment, Row, dvc_env, dvc_output, list_experiments, transfer_figure
from lmtransfer.reporting.plots import COLORS, save_figure

BUDGETS = (0.125, 0.25, 0.5, 1, 2, 4, 8)
PREFIX = "scaling-"
RESULTS = Path("results/scaling")


def experiment_name(budget: float) -> str:
    return f"{PREFIX}{budget:g}x".replace(".", "_")  # a git ref name: no dots


def budget_overrides(budget: float, base: PretrainParams) -> list[str]:
    if budget <= 0:
        raise LmtransferError(f"budget {budget:g}: a budget is a positive multiple of params.yaml's pretraining "
                              "(no pretraining at all is the scratch variant, already in every run)")
    if not base.max_steps:
        raise LmtransferError("pretrain.max_steps is 0 (whole epochs): the scaling study multiplies a step count; "
                              "set pretrain.max_steps")
    adapt = base.adapt_epochs * budget
    adapt = int(adapt) if float(adapt).is_integer() else adapt
    return ["-S", f"pretrain.max_steps={max(1, round(base.max_steps * budget))}",
            "-S", f"pretrain.adapt_epochs={adapt}"]


def run_budgets(budgets: list[float], base: PretrainParams, root: Path, jobs: int) -> None:
    """Queue one experiment per budget that has none yet, then run the queue."""
    done = {e.name for e in list_experiments(root, PREFIX)}
    for budget in budgets:
        name = experiment_name(budget)
        if name in done:
            print(f"scaling: {name} already ran: kept (`dvc exp remove {name}` to run it again)")
            continue
        dvc_output(root, "exp", "run", "--queue", "--name", name, *budget_overrides(budget, base))
        print(f"scaling: queued {name}")
    subprocess.run(["dvc", "exp", "run", "--run-all", "--jobs", str(jobs)], cwd=root, env=dvc_env(), check=True)


def _budget_of(experiment: Experiment, base: PretrainParams) -> float:
    """The budget its name says (62 steps are the 0.125x budget, not 0.124x), else its steps' share."""
    named = experiment.name.removeprefix(PREFIX).removesuffix("x").replace("_", ".")
    try:
        return float(named)
    except ValueError:
        return experiment.params["pretrain.max_steps"] / base.max_steps


def budget_row(experiment: Experiment, base: PretrainParams) -> dict:
    row, pretraining = Row.of(experiment), experiment.report["pretraining"]
    tokens = pretraining["tokens_seen"] + pretraining.get("adapt_tokens_seen", 0)
    return {
        "budget": _budget_of(experiment, base), "experiment": experiment.name, "rev": experiment.rev,
        "pretrain.max_steps": experiment.params["pretrain.max_steps"],
        "pretrain.adapt_epochs": experiment.params["pretrain.adapt_epochs"],
        "pretraining_tokens": tokens, "corpus_tokens": pretraining["tokens_seen"],
        "lm_val_perplexity": pretraining["val_perplexity"],
        "pretrained_accuracy_mean": row.pretrained[0], "pretrained_accuracy_std": row.pretrained[1],
        "scratch_accuracy_mean": row.scratch[0], "scratch_accuracy_std": row.scratch[1],
        "pretrained_accuracy_per_seed": experiment.report["pretrained"]["accuracy_per_seed"],
        "scratch_accuracy_per_seed": experiment.report["scratch"]["accuracy_per_seed"],
        "gap": row.gap[0], "gap_ci95_low": row.gap[1], "gap_ci95_high": row.gap[2], "gap_p_value": row.p_value,
        "head_start": row.head_start, "baseline_accuracy": row.baseline, "n_seeds": row.seeds,
    }


def line_fit(tokens: list[float], values: list[float]) -> dict:
    """values ~ intercept + slope * log10(tokens), with the slope's 95% interval (t distribution)."""
    x = np.log10(tokens)
    fit = stats.linregress(x, values)
    t = stats.t.ppf(0.975, len(tokens) - 2)
    return {"slope_per_decade": fit.slope, "slope_ci95": [fit.slope - t * fit.stderr, fit.slope + t * fit.stderr],
            "intercept": fit.intercept, "r2": fit.rvalue ** 2, "points": len(tokens),
            "log10_tokens_mean": float(x.mean()), "value_mean": float(np.mean(values))}


def pretraining_spread(report: dict) -> dict:
    """How far one pretraining run moves the gap: the sd of a run's per-run paired gaps (fine-tuning noise too, so
    it errs wide)."""
    gaps = [p - s for p, s in zip(report["pretrained"]["accuracy_per_seed"], report["scratch"]["accuracy_per_seed"])]
    if len(gaps) < 2:
        raise LmtransferError("the spread of pretraining runs needs a run with 2 or more of them (pretrain.seeds)")
    return {"n_pretraining_runs": report["n_pretraining_runs"], "per_run_gap": gaps,
            "sd": float(np.std(gaps, ddof=1)), "gap": report["gap"]["accuracy_mean"],
            "gap_ci95": [report["gap"]["ci95_low"], report["gap"]["ci95_high"]]}


def slope_interval_with_spread(budgets: list[dict], sd: float, level: float = 0.95) -> list[float]:
    """The gap's slope interval, each point as uncertain as its own interval plus a pretraining run's spread `sd`."""
    x = np.log10([budget["pretraining_tokens"] for budget in budgets])
    weights = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    z = stats.norm.ppf(0.5 + level / 2)
    own = np.array([(budget["gap_ci95_high"] - budget["gap_ci95_low"]) / (2 * z) for budget in budgets])
    slope = float(weights @ np.array([budget["gap"] for budget in budgets]))
    error = float(np.sqrt(np.sum(weights**2 * (own**2 + sd**2))))
    return [slope - z * error, slope + z * error]


def add_pretraining_spread(summary: dict, report: dict) -> dict:
    spread = pretraining_spread(report)
    gap_fit = {**summary["gap_fit"],
               "slope_ci95_with_pretraining_spread": slope_interval_with_spread(summary["budgets"], spread["sd"])}
    return {**summary, "gap_fit": gap_fit, "pretraining_spread": spread}


def tokens_to_reach(fit: dict, target: float) -> dict:
    """Where the pretrained-accuracy line meets the baseline, at the fitted slope and both ends of its interval
    (through the points' centre); None where it never does."""
    def reach(slope: float) -> float | None:
        if slope <= 0:
            return None
        return 10 ** (fit["log10_tokens_mean"] + (target - fit["value_mean"]) / slope)
    low_slope, high_slope = fit["slope_ci95"]
    return {"target_accuracy": target, "tokens": reach(fit["slope_per_decade"]),
            "tokens_at_steepest_slope": reach(high_slope), "tokens_at_shallowest_slope": reach(low_slope)}


def summarize(experiments: list[Experiment], base: PretrainParams) -> dict:
    done = sorted((e for e in experiments if e.report is not None and "pretraining" in e.report),
                  key=lambda e: _budget_of(e, base))
    if len(done) < 3:
        raise LmtransferError(f"{len(done)} scaling experiments have results; a trend needs at least 3 "
                              "(`lmtransfer scaling` queues and runs them)")
    rows = [budget_row(e, base) for e in done]
    tokens = [row["pretraining_tokens"] for row in rows]
    accuracy_fit = line_fit(tokens, [row["pretrained_accuracy_mean"] for row in rows])
    baseline = max(row["baseline_accuracy"] for row in rows)
    return {
        "base": {"pretrain.max_steps": base.max_steps, "pretrain.adapt_epochs": base.adapt_epochs},
        "budgets": rows,
        "gap_fit": line_fit(tokens, [row["gap"] for row in rows]),
        "pretrained_accuracy_fit": accuracy_fit,
        "baseline_reached": tokens_to_reach(accuracy_fit, baseline),
    }


def _row_of(budget: dict) -> Row:
    return Row(budget["experiment"], {}, (budget["pretrained_accuracy_mean"], budget["pretrained_accuracy_std"]),
               (budget["scratch_accuracy_mean"], budget["scratch_accuracy_std"]),
               (budget["gap"], budget["gap_ci95_low"], budget["gap_ci95_high"]), budget["gap_p_value"],
               budget["head_start"], budget["baseline_accuracy"], budget["n_seeds"])


def plot_summary(summary: dict, path: Path, dpi: int = 120) -> Path:
    budgets = summary["budgets"]
    tokens = np.array([budget["pretraining_tokens"] for budget in budgets], dtype=float)
    figure, top, bottom = transfer_figure(list(tokens), [_row_of(budget) for budget in budgets],
                                          "pretraining tokens (corpus + adaptation)")
    grid = np.logspace(math.log10(tokens.min()), math.log10(tokens.max()), 50)
    for axis, name, color in ((top, "pretrained_accuracy_fit", COLORS["pretrained"]), (bottom, "gap_fit", "tab:green")):
        fit = summary[name]
        axis.plot(grid, fit["intercept"] + fit["slope_per_decade"] * np.log10(grid), ":", color=color,
                  label=f"fit: {fit['slope_per_decade']:+.3f} per 10x tokens")
        axis.legend(fontsize=8)
    bottom.set_xscale("log")
    for budget in budgets:
        top.annotate(f"{budget['budget']:g}x", (budget["pretraining_tokens"], budget["pretrained_accuracy_mean"]),
                     textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7)
    top.set_title("Pretraining budget against transfer (test accuracy)")
    return save_figure(figure, path, dpi)


def write_study(root: Path, base: PretrainParams, out: Path = RESULTS, rev: str | None = None) -> dict:
    summary = summarize(list_experiments(root, PREFIX, rev), base)
    write_json(root / out / "summary.json", summary)
    plot_summary(summary, root / out / "scaling.png")
    return summary
