"""The transfer gap's uncertainty: a nested paired bootstrap (pretraining runs, seeds, test texts), p-value, shares."""

import numpy as np
import pytest

from lmtransfer.reporting.statistics import bootstrap_p_value, gap_uncertainty, nested_bootstrap, summarize


def test_summarize_gives_mean_sample_std_and_the_values():
    stats = summarize([0.70, 0.72, 0.74])
    assert (stats["mean"], stats["std"]) == pytest.approx((0.72, 0.02))  # sample std (ddof=1)
    assert stats["per_seed"] == [0.70, 0.72, 0.74] and summarize([0.5])["std"] == 0.0


def _correct(rate: float, runs: int, seeds: int, n_examples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((runs, seeds, n_examples)) < rate


def test_a_real_gap_has_an_interval_above_zero_and_a_small_p_value():
    better, worse = _correct(0.80, 3, 1, 2000, 1), _correct(0.70, 3, 1, 2000, 2)
    result = gap_uncertainty(better, worse, 2000, seed=0)
    assert 0 < result["ci95_low"] < result["mean"] < result["ci95_high"]
    assert result["mean"] == pytest.approx(better.mean() - worse.mean())
    assert result["ci95_high"] - result["ci95_low"] < 0.08
    assert result["p_value"] == pytest.approx(2 / 2001)  # no resample at or below zero: the smallest p it can give


@pytest.mark.parametrize("shift", [0.0, 0.01, 0.02, 0.03, 0.05])
def test_the_p_value_says_what_the_interval_says(shift):
    """p < 0.05 exactly when the 95% interval leaves out zero: both read the same resamples."""
    rng = np.random.default_rng(9)
    a, b = rng.random((3, 2, 1500)) < 0.70 + shift, rng.random((3, 2, 1500)) < 0.70
    result = gap_uncertainty(a, b, 1000, seed=1)
    assert (result["p_value"] < 0.05) == (result["ci95_low"] > 0 or result["ci95_high"] < 0)
    if shift == 0:
        assert result["ci95_low"] < 0 < result["ci95_high"] and result["p_value"] > 0.05


def test_identical_systems_have_p_value_one_and_a_zero_interval():
    a = _correct(0.7, 2, 2, 100, 5)
    result = gap_uncertainty(a, a.copy(), 500)
    assert result["p_value"] == 1.0 and (result["ci95_low"], result["ci95_high"]) == (0.0, 0.0)
    assert bootstrap_p_value(np.zeros(10)) == 1.0


@pytest.mark.slow
def test_pretraining_runs_that_disagree_widen_the_interval_and_take_the_larger_share():
    """The same mean gap is less sure when the pretraining runs disagree, and the spread says so."""
    rng = np.random.default_rng(6)
    steady = np.repeat(rng.random((1, 1, 3000)) < 0.7, 3, axis=0)
    shifted = steady.copy()
    shifted[0, 0, :300] = True   # pretraining run 0 much better, run 2 much worse: same mean, more spread
    shifted[2, 0, :300] = False
    reference = np.repeat(rng.random((1, 1, 3000)) < 0.65, 3, axis=0)
    narrow, wide = gap_uncertainty(steady, reference, 3000, seed=1), gap_uncertainty(shifted, reference, 3000, seed=1)
    assert wide["ci95_high"] - wide["ci95_low"] > narrow["ci95_high"] - narrow["ci95_low"]
    assert narrow["share"]["pretraining_runs"] == pytest.approx(0, abs=1e-12)  # identical runs: nothing to draw
    assert narrow["spread"]["finetuning_seeds"] == 0.0  # one seed per run
    assert wide["share"]["pretraining_runs"] > 0.5 and sum(wide["share"].values()) == pytest.approx(1.0)


def test_fine_tuning_seeds_are_resampled_within_each_pretraining_run():
    """Seeds that disagree inside every run move the seeds' share, not the runs': the runs' means agree."""
    rng = np.random.default_rng(2)
    a = np.repeat(np.repeat(rng.random((1, 1, 2000)) < 0.7, 2, axis=1), 3, axis=0)
    a[:, 0, :200] = True
    a[:, 1, :200] = False
    b = np.repeat(np.repeat(rng.random((1, 1, 2000)) < 0.65, 2, axis=1), 3, axis=0)
    result = gap_uncertainty(a, b, 2000, seed=0)
    assert result["spread"]["pretraining_runs"] == pytest.approx(0, abs=1e-12)
    assert result["share"]["finetuning_seeds"] > result["share"]["test_examples"]


def test_resampling_is_seeded_and_draws_only_the_named_sources():
    difference = np.random.default_rng(4).normal(size=(3, 2, 50))
    assert np.allclose(nested_bootstrap(difference, 100, seed=0, resample=()), difference.mean())
    a, b = _correct(0.8, 3, 1, 500, 7), _correct(0.7, 3, 1, 500, 8)
    assert gap_uncertainty(a, b, 1000, seed=3) == gap_uncertainty(a, b, 1000, seed=3)
    assert gap_uncertainty(a, b, 1000, seed=3) != gap_uncertainty(a, b, 1000, seed=4)
