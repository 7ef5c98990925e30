"""How sure the pretrained-minus-scratch gap is: seeds and test examples are both sources of noise.

Each variant is fine-tuned once per seed and scored on the same test examples, so
the data form two (seeds x examples) matrices of 0/1 correctness, paired by seed
(same seed, same batch order) and by example. The interval resamples both seeds
and examples (a two-level paired bootstrap); the p-value comes from scipy's paired
permutation test on the per-example difference averaged over seeds.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def summarize(values: list[float]) -> dict[str, float | list[float]]:
    """Mean, sample standard deviation (0 for a single seed) and the values themselves."""
    array = np.asarray(values, dtype=float)
    return {
        "mean": float(array.mean()),
        "std": float(array.std(ddof=1)) if array.size > 1 else 0.0,
        "per_seed": [float(v) for v in array],
    }


def paired_bootstrap_interval(
    correct_a: np.ndarray, correct_b: np.ndarray, n_resamples: int = 10_000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of mean(a) - mean(b), resampling seeds and test examples with replacement.

    correct_a, correct_b: (n_seeds, n_examples) arrays, row s of both from seed s.
    """
    difference = np.asarray(correct_a, dtype=float) - np.asarray(correct_b, dtype=float)
    n_seeds, n_examples = difference.shape
    rng = np.random.default_rng(seed)
    gaps = np.empty(n_resamples)
    chunk = max(1, 2_000_000 // max(n_examples, 1))  # bound memory: chunk x n_examples counts at a time
    for begin in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - begin)
        seed_weights = rng.multinomial(n_seeds, np.full(n_seeds, 1 / n_seeds), size=size) / n_seeds
        example_weights = rng.multinomial(n_examples, np.full(n_examples, 1 / n_examples), size=size) / n_examples
        gaps[begin : begin + size] = np.einsum("rs,se,re->r", seed_weights, difference, example_weights)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(gaps, [tail, 100 - tail])
    return float(low), float(high)


def paired_permutation_p_value(
    correct_a: np.ndarray, correct_b: np.ndarray, n_resamples: int = 10_000, seed: int = 0
) -> float:
    """Two-sided p-value that a and b score alike: the sign of each example's difference is flipped at random."""
    per_example_a = np.asarray(correct_a, dtype=float).mean(axis=0)
    per_example_b = np.asarray(correct_b, dtype=float).mean(axis=0)
    if np.array_equal(per_example_a, per_example_b):
        return 1.0
    result = stats.permutation_test(
        (per_example_a, per_example_b),
        lambda a, b, axis: np.mean(a - b, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(result.pvalue)
