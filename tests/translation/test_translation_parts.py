"""The translation pipeline's own parts: params, pair batches, corpus-level intervals, the reports."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sacrebleu.metrics import BLEU, CHRF

from lmtransfer.core.errors import ConfigError
from lmtransfer.translation import evaluate
from lmtransfer.translation.config import parse_translation_params
from lmtransfer.translation.training import PairSplit, pair_batches, steps_per_epoch, trainable_pairs

from shipped import shipped_raw


def _split(lengths: list[tuple[int, int]]) -> PairSplit:
    """Pairs whose ids encode (pair index, position): 10 * i + j + 1."""
    sources = [np.array([10 * i + j + 1 for j in range(s)]) for i, (s, _) in enumerate(lengths)]
    targets = [np.array([10 * i + j + 1 for j in range(t)]) for i, (_, t) in enumerate(lengths)]
    offsets = lambda rows: np.concatenate([[0], np.cumsum([len(r) for r in rows])])  # noqa: E731
    return PairSplit(np.concatenate(sources), offsets(sources), np.concatenate(targets), offsets(targets))


def test_the_translation_params_file_is_recognised_by_its_task_and_validated():
    def parse(changes):
        return parse_translation_params(shipped_raw(changes, "translation"))

    params = parse({"finetune": {"epochs": 2}})
    assert type(params).__name__ == "TranslationParams" and params.finetune.epochs == 2
    assert params.causal_attention  # the pretrain stage reads it as from the classification params
    for changes, message in [({"task": "summarisation"}, "task: must be one of classification, translation"),
                             ({"pretrain": {"adapt_epochs": 2}}, "pretrain.adapt_epochs: must be 0 for translation"),
                             ({"data": {"source": "files"}}, "data.source: files needs data.train"),
                             ({"finetune": {"beam": 4}}, "finetune.beam: unknown parameter"),
                             ({"finetune": {"label_smoothing": 1.5}}, "finetune.label_smoothing")]:
        with pytest.raises(ConfigError, match=message):
            parse(changes)


def test_pair_batches_cover_every_usable_pair_once_with_the_target_shifted_by_one():
    split = _split([(3, 4), (5, 2), (2, 6), (9, 9), (4, 4), (3, 3), (6, 5)])
    usable = trainable_pairs(split, max_len=6)
    assert list(usable) == [0, 1, 2, 4, 5, 6]  # pair 3 is longer than 6 on a side: left out, not cut
    seen = []
    for source, target_in, target_out in pair_batches(split, usable, 4, 0, np.random.default_rng(0)):
        assert torch.equal(target_in[:, 1:], target_out[:, :-1])  # the decoder reads what it predicted before
        for row in source:
            seen.append(int(row[0]) // 10)
    assert sorted(seen) == list(usable)
    assert steps_per_epoch(len(usable), 4) == 2


def test_scores_from_summed_sentence_statistics_are_sacrebleus_corpus_scores():
    hypotheses = ["le chat dort", "un grand chien mange", "le poisson", "oiseau rouge et petit chat"]
    references = ["le chat dort", "le grand chien mange", "le petit poisson rouge", "un oiseau rouge et un chat"]
    for metric, scorer in (("bleu", BLEU()), ("chrf", CHRF())):
        stats = evaluate.sentence_statistics(metric, hypotheses, references)
        assert stats.shape[0] == len(hypotheses)
        assert evaluate.corpus_score(metric, stats.sum(axis=0)) == pytest.approx(
            scorer.corpus_score(hypotheses, [references]).score)


def test_the_report_pairs_variants_by_sentence_and_its_intervals_hold_the_means():
    references = [f"le chat {i} dort bien" for i in range(40)]
    good = {f"{p}-0": list(references) for p in (0, 1)}
    bad = {f"{p}-0": [r.replace("chat", "chien") if i % (2 + p) else r for i, r in enumerate(references)]
           for p in (0, 1)}
    report = evaluate.translation_report({"pretrained": good, "scratch": bad}, references, ["the cat"] * 40,
                                         n_resamples=200, seed=0,
                                         first_epoch_bleu={"pretrained": [1.0, 2.0], "scratch": [0.5, 0.5]})
    assert report["pretrained"]["bleu_mean"] == pytest.approx(100.0)
    assert report["gap"]["bleu_mean"] > 0 and report["gap"]["bleu_ci95_low"] > 0  # every resample favours it
    assert report["gap"]["bleu_p_value"] < 0.01
    for variant in ("pretrained", "scratch"):
        assert report[variant]["bleu_ci95_low"] <= report[variant]["bleu_mean"] + 1e-9
        assert report[variant]["bleu_mean"] <= report[variant]["bleu_ci95_high"] + 1e-9
    assert report["baseline"]["copy_source_bleu"] < 5
    assert report["gap"]["first_epoch_val_bleu_mean"] == pytest.approx(1.0)
    same = evaluate.translation_report({"pretrained": bad, "scratch": bad}, references, references, n_resamples=200,
                                       seed=0)
    assert same["gap"]["bleu_mean"] == 0 and same["gap"]["bleu_p_value"] == 1.0
    assert "first_epoch_val_bleu_mean" not in same["gap"]  # a report of another test set (the clauses) has none


def test_the_short_sentence_report_sits_beside_the_verses_in_the_headline_and_the_printout():
    references = [f"le chat {i} dort" for i in range(30)]
    models = {"pretrained": {"0-0": list(references)},
              "scratch": {"0-0": [r.replace("chat", "chien") for r in references]}}
    report = evaluate.translation_report(models, references, references, n_resamples=100, seed=0,
                                         first_epoch_bleu={"pretrained": [2.0], "scratch": [1.0]})
    short = {variant: {"0-0": by_run["0-0"][:10]} for variant, by_run in models.items()}
    report["clauses"] = evaluate.translation_report(short, references[:10], references[:10], n_resamples=100, seed=0)
    headline = evaluate.translation_headline(report, {"val_perplexity": 50.0})
    assert headline["clauses_bleu_pretrained"] == pytest.approx(100.0)
    assert headline["clauses_gap"] == report["clauses"]["gap"]["bleu_mean"] > 0
    assert "clauses_lm_val_ppl" not in headline and "clauses_n_seeds" not in headline
    lines = evaluate.report_lines(report)
    assert any("10 short test sentences" in line for line in lines)
    assert sum("validation BLEU after epoch 1" in line for line in lines) == 1  # only the verses have a head start


def test_the_gap_interval_samples_pretraining_runs_as_well_as_sentences():
    """Two pretraining runs that disagree: resampling the runs too spans both signs; sentences alone would not."""
    references = [f"le chat {i} dort bien ce soir" for i in range(60)]
    wrong = [r.replace("chat", "chien").replace("soir", "matin") for r in references]
    pretrained = {"0-0": list(references), "1-0": list(wrong)}
    scratch = {"0-0": [w if i % 3 else r for i, (r, w) in enumerate(zip(references, wrong))],
               "1-0": [r if i % 3 else w for i, (r, w) in enumerate(zip(references, wrong))]}
    report = evaluate.translation_report({"pretrained": pretrained, "scratch": scratch}, references, references,
                                         n_resamples=300, seed=0)
    assert report["runs"] == ["0-0", "1-0"] and report["n_seeds"] == 2
    assert report["gap"]["bleu_ci95_low"] < 0 < report["gap"]["bleu_ci95_high"]
    alone = {"pretrained": {"0-0": pretrained["0-0"]}, "scratch": {"0-0": scratch["0-0"]}}
    one_run = evaluate.translation_report(alone, references, references, n_resamples=300, seed=0)
    assert one_run["gap"]["bleu_ci95_low"] > 0  # with one run the sentences alone decide


def test_the_lab_report_scores_each_sentence_and_each_variant_and_repeats_are_counted_per_translation():
    assert evaluate.repeated_share(["Je suis suis suis.", "Je suis un étudiant.", "la la la la", "a b a b a b"]) == 0.5
    assert evaluate.repeated_share(["suis suis"]) == 0.0 and evaluate.repeated_share([]) == 0.0
    sources, references = ["I am a student.", "God is love."], ["Je suis étudiant.", "Dieu est amour."]
    models = {"pretrained": {"0-0": ["Je suis étudiant.", "Dieu est amour."], "1-0": ["Je suis.", "Dieu est bon."]},
              "scratch": {"0-0": ["suis suis suis", "Le roi."], "1-0": ["Je.", "Dieu."]}}
    lab = evaluate.lab_report(models, sources, references)
    assert lab["n_sentences"] == 2 and lab["sentences"][0]["pretrained_0-0"] == "Je suis étudiant."
    assert lab["sentences"][0]["pretrained_0-0_chrf"] == pytest.approx(100.0)
    assert lab["pretrained_chrf_mean"] > lab["scratch_chrf_mean"] > 0
