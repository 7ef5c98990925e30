"""How sure the pretrained-minus-scratch gap is: a nested paired bootstrap over the (pretraining runs x fine-tuning
seeds x test examples) 0/1 correctness arrays (Davison & Hinkley's two-stage bootstrap, plus the examples); the
p-value reads the same resamples, so p < 0.05 exactly when the 95% interval leaves out zero."""

from __future__ import annotations

import numpy as np

SOURCES = ("pretraining_runs", "finetuning_seeds", "test_examples")


def summarize(values: list[float]) -> dict[str, float | list[float]]:
    """Mean, sample standard deviation (0 for a single seed) and the values."""
    array = np.asarray(values, dtype=float)
    return {"mean": float(array.mean()), "std": float(array.std(ddof=1)) if array.size > 1 else 0.0,
            "per_seed": [float(v) for v in array]}


def nested_bootstrap(difference: np.ndarray, n_resamples: int = 10_000, seed: int = 0,
                     resample: tuple[str, ...] = SOURCES) -> np.ndarray:
    """Resampled means of `difference` (runs, seeds, examples), drawing the sources in `resample`."""
    difference = np.asarray(difference, dtype=float)
    n_runs, n_seeds, n_examples = difference.shape
    rng = np.random.default_rng(seed)
    gaps = np.empty(n_resamples)
    chunk = max(1, 2_000_000 // max(n_examples, 1))  # about 2M example weights at a time
    for begin in range(0, n_resamples, chunk):
        size = min(chunk, n_resamples - begin)
        runs = (rng.integers(n_runs, size=(size, n_runs)) if "pretraining_runs" in resample
                else np.broadcast_to(np.arange(n_runs), (size, n_runs)))
        seeds = (rng.integers(n_seeds, size=(size, n_runs, n_seeds)) if "finetuning_seeds" in resample
                 else np.broadcast_to(np.arange(n_seeds), (size, n_runs, n_seeds)))
        cell_weights = np.zeros((size, n_runs, n_seeds))
        np.add.at(cell_weights, (np.arange(size)[:, None, None], runs[:, :, None], seeds), 1.0 / (n_runs * n_seeds))
        if "test_examples" in resample:
            example_weights = rng.multinomial(n_examples, np.full(n_examples, 1 / n_examples), size=size) / n_examples
            gaps[begin : begin + size] = np.einsum("rpf,pfe,re->r", cell_weights, difference, example_weights)
        else:
            gaps[begin : begin + size] = np.einsum("rpf,pf->r", cell_weights, difference.mean(axis=2))
    return gaps


def bootstrap_p_value(gaps: np.ndarray) -> float:
    """Twice the smaller share of resamples on either side of zero (the data counted as one resample)."""
    n = len(gaps)
    below, above = (np.count_nonzero(gaps <= 0) + 1) / (n + 1), (np.count_nonzero(gaps >= 0) + 1) / (n + 1)
    return float(min(1.0, 2 * min(below, above)))


def gap_uncertainty(correct_a: np.ndarray, correct_b: np.ndarray, n_resamples: int = 10_000, seed: int = 0,
                    level: float = 0.95) -> dict:
    """The gap mean(a) - mean(b) with its interval, p-value and each source's share of the spread (each source
    resampled alone; with one seed per run, the seeds' spread is 0 and the runs' holds both)."""
    difference = np.asarray(correct_a, dtype=float) - np.asarray(correct_b, dtype=float)
    gaps = nested_bootstrap(difference, n_resamples, seed)
    tail = (1 - level) / 2 * 100
    low, high = (float(bound) for bound in np.percentile(gaps, [tail, 100 - tail]))
    spread = {source: float(nested_bootstrap(difference, n_resamples, seed, (source,)).std()) if size > 1 else 0.0
              for source, size in zip(SOURCES, difference.shape)}  # one of a kind: nothing to draw
    total = sum(value**2 for value in spread.values())
    return {"mean": float(difference.mean()), "ci95_low": low, "ci95_high": high, "p_value": bootstrap_p_value(gaps),
            "std": float(gaps.std()), "spread": spread,
            "share": {source: (value**2 / total if total else 0.0) for source, value in spread.items()}}
