"""The uncertainty of the transfer gap: spread over seeds, paired bootstrap interval, paired permutation test."""

import numpy as np
import pytest

from lmtransfer.reporting.statistics import paired_bootstrap_interval, paired_permutation_p_value, summarize


def test_summarize_gives_mean_sample_std_and_the_values():
    stats = summarize([0.70, 0.72, 0.74])
    assert stats["mean"] == pytest.approx(0.72)
    assert stats["std"] == pytest.approx(0.02)  # sample std (ddof=1)
    assert stats["per_seed"] == [0.70, 0.72, 0.74]
    assert summarize([0.5])["std"] == 0.0


def _correct(rate: float, n_seeds: int, n_examples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((n_seeds, n_examples)) < rate


def test_a_real_gap_has_an_interval_above_zero_and_a_small_p_value():
    better, worse = _correct(0.80, 3, 2000, 1), _correct(0.70, 3, 2000, 2)
    low, high = paired_bootstrap_interval(better, worse, 2000, seed=0)
    observed = better.mean() - worse.mean()
    assert 0 < low < observed < high
    assert high - low < 0.08
    assert paired_permutation_p_value(better, worse, 2000, seed=0) < 0.001


def test_no_gap_gives_an_interval_around_zero_and_a_large_p_value():
    a, b = _correct(0.75, 3, 2000, 3), _correct(0.75, 3, 2000, 4)
    low, high = paired_bootstrap_interval(a, b, 2000, seed=0)
    assert low < 0 < high
    assert paired_permutation_p_value(a, b, 2000, seed=0) > 0.05


def test_identical_systems_have_p_value_one():
    a = _correct(0.7, 2, 100, 5)
    assert paired_permutation_p_value(a, a.copy()) == 1.0
    assert paired_bootstrap_interval(a, a.copy(), 500) == (0.0, 0.0)


def test_the_interval_widens_when_the_seeds_disagree():
    """Seed-to-seed variation is part of the uncertainty: the same mean gap is less sure when seeds disagree."""
    rng = np.random.default_rng(6)
    base = rng.random((1, 3000)) < 0.7
    steady = np.repeat(base, 3, axis=0)
    shifted = steady.copy()
    shifted[0, :300] = True   # seed 0 much better, seed 2 much worse: same mean, more spread
    shifted[2, :300] = False
    reference = np.repeat(rng.random((1, 3000)) < 0.65, 3, axis=0)
    narrow = np.subtract(*paired_bootstrap_interval(steady, reference, 3000, seed=1)[::-1])
    wide = np.subtract(*paired_bootstrap_interval(shifted, reference, 3000, seed=1)[::-1])
    assert wide > narrow


def test_resampling_is_seeded():
    a, b = _correct(0.8, 3, 500, 7), _correct(0.7, 3, 500, 8)
    assert paired_bootstrap_interval(a, b, 1000, seed=3) == paired_bootstrap_interval(a, b, 1000, seed=3)
    assert paired_permutation_p_value(a, b, 1000, seed=3) == paired_permutation_p_value(a, b, 1000, seed=3)
