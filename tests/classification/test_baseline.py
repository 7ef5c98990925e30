"""The TF-IDF + logistic regression baseline: tuned on valid, trained on train, scored on test."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import yaml

from lmtransfer.classification.baseline import run_baseline
from lmtransfer.classification.config import parse_classification_params
from lmtransfer.core.config import ConfigError

from shipped import shipped, shipped_raw

GOOD = ["great", "wonderful", "brilliant", "charming", "superb"]
BAD = ["awful", "boring", "dull", "tedious", "dreadful"]
NEUTRAL = ["average", "ordinary", "middling", "so-so", "passable"]
FILLER = ["the", "film", "movie", "plot", "was", "is", "a", "story", "actors", "script"]


def _texts(n: int, seed: int, n_classes: int = 2) -> tuple[list[str], np.ndarray]:
    """Filler words and one word of the class's evidence."""
    rng = random.Random(seed)
    labels, texts = np.arange(n) % n_classes, []
    for label in labels:
        words = rng.sample(FILLER, 5) + [rng.choice([BAD, GOOD, NEUTRAL][label])]
        rng.shuffle(words)
        texts.append(" ".join(words))
    return texts, labels


@pytest.mark.parametrize("n_classes", [2, 3])
def test_the_baseline_learns_word_evidence_and_picks_c_on_validation(n_classes):
    params = shipped("baseline", c_values=[0.01, 1.0, 10.0])
    result = run_baseline(*_texts(200, 0, n_classes), *_texts(60, 1, n_classes), *_texts(100, 2, n_classes),
                          params=params)
    assert result.accuracy > 0.95 and result.macro_f1 > 0.95
    assert set(result.valid_accuracy_by_c) == {0.01, 1.0, 10.0}
    assert result.valid_accuracy_by_c[result.best_c] == max(result.valid_accuracy_by_c.values())
    assert len(result.test_predictions) == 100 and set(result.test_predictions) == set(range(n_classes))


def test_the_baseline_never_sees_test_labels():
    """Flipping every test label flips the accuracy: the model was fit on train and tuned on valid only."""
    train, valid, (test_texts, test_labels) = _texts(200, 0), _texts(60, 1), _texts(100, 2)
    params = shipped("baseline", c_values=[1.0])
    straight = run_baseline(*train, *valid, test_texts, test_labels, params=params)
    flipped = run_baseline(*train, *valid, test_texts, 1 - test_labels, params=params)
    assert straight.accuracy + flipped.accuracy == pytest.approx(1.0)
    assert np.array_equal(straight.test_predictions, flipped.test_predictions)


@pytest.mark.parametrize("section, message", [
    ({"c_values": [1.0, -2.0]}, "baseline.c_values"), ({"char_ngrams": [5, 2]}, "baseline.char_ngrams"),
    ({"word_ngrams": [1]}, "baseline.word_ngrams"),
])
def test_bad_baseline_params_name_the_key(section, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse_classification_params(shipped_raw({"baseline": section}))


def test_the_committed_baselines_c_is_inside_its_grid():
    """A C at either end of `baseline.c_values` may be a grid edge, not an optimum: the baseline understated."""
    repo = Path(__file__).resolve().parents[2]
    grid = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8"))["baseline"]["c_values"]
    committed = json.loads((repo / "metrics/baseline.json").read_text(encoding="utf-8"))
    assert grid == shipped("baseline").c_values  # the code's default is the shipped grid
    assert sorted(map(float, committed["valid_accuracy_by_c"])) == sorted(grid)  # the run used this grid
    assert min(grid) < committed["best_c"] < max(grid)
