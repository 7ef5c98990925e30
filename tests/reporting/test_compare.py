"""lmtransfer compare and lmtransfer scaling on made-up experiments: what they read, order, fit and refuse."""

import json
import math

import pytest

from lmtransfer.core.errors import LmtransferError
from lmtransfer.reporting import experiments as experiments_module
from lmtransfer.reporting import scaling
from lmtransfer.reporting.experiments import Experiment, compare_rows, format_table, list_experiments, plot_by

from shipped import shipped


def _report(pretrained: float, scratch: float, tokens: int = 1000, ppl: float = 80.0) -> dict:
    gap = pretrained - scratch
    return {
        "gap": {"accuracy_mean": gap, "ci95_low": gap - 0.02, "ci95_high": gap + 0.02, "p_value": 0.01,
                "first_epoch_val_accuracy_mean": 0.05},
        "pretrained": {"accuracy_mean": pretrained, "accuracy_std": 0.01, "accuracy_per_seed": [pretrained] * 3},
        "scratch": {"accuracy_mean": scratch, "accuracy_std": 0.02, "accuracy_per_seed": [scratch] * 3},
        "baseline": {"accuracy": 0.8}, "n_seeds": 3,
        "pretraining": {"tokens_seen": tokens, "adapt_tokens_seen": tokens // 10, "val_perplexity": ppl},
    }


def _experiment(name: str, lr: float, pretrained: float, report: bool = True, **params) -> Experiment:
    params = {"finetune.lr": lr, "finetune.epochs": 2, "model.n_layers": 4, **params}
    return Experiment(name, f"{name}-rev", params, _report(pretrained, 0.6) if report else None)


def _budget(name: str, pretrained: float, steps: float, adapt: float, tokens: int = 1000) -> Experiment:
    experiment = _experiment(name, 0.001, pretrained, **{"pretrain.max_steps": steps, "pretrain.adapt_epochs": adapt})
    experiment.report = _report(pretrained, 0.6, tokens=tokens)
    return experiment


def test_compare_orders_by_the_swept_param_shows_what_changed_and_skips_experiments_without_results(tmp_path):
    found = [_experiment("b", 0.004, 0.70), _experiment("a", 0.001, 0.66), _experiment("queued", 0.002, 0, False)]
    rows, shown = compare_rows(found, by="finetune.lr")
    assert [row.name for row in rows] == ["a", "b"] and shown == ["finetune.lr"]  # epochs, n_layers unchanged
    table = format_table(rows, shown)
    header, first = table.splitlines()[:2]
    assert header.split()[:3] == ["experiment", "lr", "pretrained"] and "lr = finetune.lr" in table
    assert first.split()[:3] == ["a", "0.001", "0.660"] and "+0.060 [+0.040, +0.080]" in first
    words = " ".join(table.split())
    assert "0.600 ± 0.020" in first and "over 3 runs" in words and "0.800 in every experiment" in words
    assert plot_by(rows, "finetune.lr", tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_the_table_fits_120_columns_with_two_swept_params_and_shows_differing_baselines():
    found = [_budget("scaling-0_125x", 0.65, 62, 0.625), _budget("scaling-2x", 0.65, 1000, 10)]
    rows, shown = compare_rows(found, by="pretrain.max_steps")
    table = format_table(rows, shown).splitlines()
    assert shown == ["pretrain.max_steps", "pretrain.adapt_epochs"] and table[0].split()[1:3] == [
        "max_steps", "adapt_epochs"]
    assert max(len(line) for line in table[:3]) <= 120 and "baseline" not in table[0]
    rows[1].baseline = 0.75
    lines = format_table(rows, shown).splitlines()
    assert lines[0].split()[-1] == "baseline" and lines[2].split()[-1] == "0.750"
    clash = [_experiment("x", 0.001, 0.6, **{"pretrain.lr": 0.2}),
             _experiment("y", 0.002, 0.6, **{"pretrain.lr": 0.1, "model.n_layers": 6})]
    assert format_table(*compare_rows(clash)).splitlines()[0].split()[1:4] == [
        "finetune.lr", "n_layers", "pretrain.lr"]


def test_compare_refuses_a_param_that_is_not_in_params_yaml_naming_it():
    with pytest.raises(LmtransferError, match="--by finetune.lrr: not a key of params.yaml"):
        compare_rows([_experiment("a", 0.001, 0.66)], by="finetune.lrr")
    with pytest.raises(LmtransferError, match="no experiment has results"):
        compare_rows([_experiment("q", 0.001, 0.66, report=False)])


def test_experiments_are_read_from_dvc_exp_show_json_with_each_ones_report(monkeypatch, tmp_path):
    def rev(sha, name, lr, experiments=None):
        params = {"params.yaml": {"data": {"finetune": {"lr": lr}}}}
        return {"rev": sha, "name": name, "data": {"params": params}, "experiments": experiments}

    running = {"name": "exp-2", "executor": {"state": "running"}, "revs": [{"rev": "ba5", "name": "exp-2", "data": {}}]}
    shown = [rev("workspace", None, 1), rev("abc1234def", "main", 1, [{"name": "exp-1", "revs": [
        rev("f00", "exp-1", 2)]}, running])]
    monkeypatch.setattr(experiments_module, "dvc_output", lambda root, *args: json.dumps(shown))
    reports = {"workspace": {"r": 1}, "abc1234def": {"r": 1}, "f00": {"r": 2}}
    monkeypatch.setattr(experiments_module, "_report_at", lambda root, rev: reports[rev])
    assert [(e.name, e.params) for e in list_experiments(tmp_path)] == [("main", {"finetune.lr": 1}),
                                                                       ("exp-1", {"finetune.lr": 2})]
    assert [e.name for e in list_experiments(tmp_path, "exp-")] == ["exp-1"]  # the unchanged workspace left out
    reports["workspace"] = {"r": 3}
    assert [e.name for e in list_experiments(tmp_path)] == ["workspace", "main", "exp-1"]


def test_a_budget_scales_corpus_steps_and_adaptation_alike_and_refuses_zero():
    base = shipped("pretrain", max_steps=500, adapt_epochs=5)
    assert scaling.budget_overrides(0.125, base) == ["-S", "pretrain.max_steps=62", "-S", "pretrain.adapt_epochs=0.625"]
    assert scaling.budget_overrides(2, base) == ["-S", "pretrain.max_steps=1000", "-S", "pretrain.adapt_epochs=10"]
    assert scaling.experiment_name(0.125) == "scaling-0_125x" and scaling.experiment_name(4) == "scaling-4x"
    with pytest.raises(LmtransferError, match="positive multiple"):
        scaling.budget_overrides(0, base)
    with pytest.raises(LmtransferError, match="pretrain.max_steps is 0"):
        scaling.budget_overrides(1, shipped("pretrain", max_steps=0))


def test_the_scaling_summary_fits_the_trend_and_says_where_it_would_reach_the_baseline(tmp_path):
    base = shipped("pretrain", max_steps=500, adapt_epochs=5)
    found = [_budget(scaling.experiment_name(b), 0.65 + 0.05 * math.log2(b), int(500 * b), 5 * b, int(1000 * b))
             for b in (0.5, 1, 2, 4)]  # the pretrained accuracy climbs 0.05 per doubling of tokens
    summary = scaling.summarize(found[::-1], base)
    assert [row["budget"] for row in summary["budgets"]] == [0.5, 1, 2, 4]
    assert summary["budgets"][1]["pretraining_tokens"] == 1100 and summary["budgets"][1]["lm_val_perplexity"] == 80
    per_decade = 0.05 / math.log10(2)
    assert summary["pretrained_accuracy_fit"]["slope_per_decade"] == pytest.approx(per_decade)
    assert summary["gap_fit"]["slope_per_decade"] == pytest.approx(per_decade)
    reach = summary["baseline_reached"]  # 0.8 = 0.65 + 0.05 * log2(b): b = 8, 8,800 tokens
    assert reach["target_accuracy"] == 0.8 and reach["tokens"] == pytest.approx(8800, rel=1e-6)
    assert scaling.plot_summary(summary, tmp_path / "scaling.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(LmtransferError, match="a trend needs at least 3"):
        scaling.summarize(found[:2], base)


def test_a_line_that_does_not_climb_never_reaches_the_baseline():
    fit = {"slope_per_decade": -0.01, "slope_ci95": [-0.02, 0.03], "intercept": 0.7, "log10_tokens_mean": 6.0,
           "value_mean": 0.7}
    reach = scaling.tokens_to_reach(fit, 0.8)
    assert reach["tokens"] is None and reach["tokens_at_shallowest_slope"] is None
    assert reach["tokens_at_steepest_slope"] == pytest.approx(10 ** (6 + 0.1 / 0.03))  # through the centre


def test_the_gap_slope_counts_the_measured_spread_of_pretraining_runs():
    """Each budget pretrains once: its point carries one pretraining run's spread, which widens the slope's interval."""
    budgets = [{"pretraining_tokens": 10**k, "gap": 0.02 * k, "gap_ci95_low": 0.02 * k - 0.02,
                "gap_ci95_high": 0.02 * k + 0.02} for k in range(5, 9)]
    report = {"n_pretraining_runs": 3, "pretrained": {"accuracy_per_seed": [0.68, 0.70, 0.69]},
              "scratch": {"accuracy_per_seed": [0.62, 0.63, 0.64]},
              "gap": {"accuracy_mean": 0.06, "ci95_low": 0.03, "ci95_high": 0.09}}
    summary = scaling.add_pretraining_spread({"gap_fit": {"slope_per_decade": 0.02}, "budgets": budgets}, report)
    spread = summary["pretraining_spread"]
    assert spread["per_run_gap"] == pytest.approx([0.06, 0.07, 0.05]) and spread["sd"] == pytest.approx(0.01)
    low, high = summary["gap_fit"]["slope_ci95_with_pretraining_spread"]
    assert low < 0.02 < high and (low + high) / 2 == pytest.approx(0.02)
    own_low, own_high = scaling.slope_interval_with_spread(budgets, 0.0)
    assert high - low > own_high - own_low
    with pytest.raises(LmtransferError, match="2 or more"):
        scaling.pretraining_spread({**report, "pretrained": {"accuracy_per_seed": [0.7]},
                                    "scratch": {"accuracy_per_seed": [0.6]}})
