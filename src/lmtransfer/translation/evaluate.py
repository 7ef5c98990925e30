"""BLEU and chrF with sacreBLEU, per run and with paired bootstrap intervals: as sacreBLEU's own bootstrap, each
sentence's match statistics are extracted once and a resample (the same sentences and runs for every variant) sums
them. Baseline: the source copied as its own "translation"."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from lmtransfer.core.paths import VARIANTS

METRICS = {"bleu": BLEU, "chrf": CHRF}


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float | str]:
    """BLEU and chrF of a whole test set (one reference per sentence), with their signatures."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("no sentences to score")
    bleu, chrf = BLEU(), CHRF()
    hyps, refs = list(hypotheses), [list(references)]
    bleu_score, chrf_score = bleu.corpus_score(hyps, refs), chrf.corpus_score(hyps, refs)
    return {
        "bleu": round(bleu_score.score, 4),
        "chrf": round(chrf_score.score, 4),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def sentence_statistics(metric: str, hypotheses: list[str], references: list[str]) -> np.ndarray:
    """(sentences, statistics) match counts, what sacreBLEU sums into a corpus score."""
    scorer = METRICS[metric]()
    return np.asarray(scorer._extract_corpus_statistics(hypotheses, [references]), dtype=np.int64)


def corpus_score(metric: str, summed: np.ndarray) -> float:
    return float(METRICS[metric]()._compute_score_from_stats(summed.tolist()).score)


def repeated_share(hypotheses: list[str], times: int = 3) -> float:
    """Share of translations repeating one word `times`+ times in a row ("suis suis suis"), which BLEU hides."""
    def repeats(words: list[str]) -> bool:
        return any(len(set(words[i: i + times])) == 1 for i in range(len(words) - times + 1))

    return sum(repeats(re.findall(r"\w+", text)) for text in hypotheses) / max(len(hypotheses), 1)


def _interval(values: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def translation_report(translations: dict[str, dict[str, list[str]]], references: list[str], sources: list[str],
                       n_resamples: int, seed: int, first_epoch_bleu: dict[str, list[float]] | None = None) -> dict:
    """`translations[variant][run]` (a scratch run is its pretrained namesake's twin): per variant the scores, mean,
    std and 95% interval; the gap with its interval and bootstrap p-value. Each resample draws runs (twins together)
    and sentences with replacement, so the interval covers the pretraining draw too."""
    runs = sorted(translations["pretrained"])
    if sorted(translations["scratch"]) != runs:
        raise ValueError("pretrained and scratch must be evaluated on the same runs")
    rng = np.random.default_rng(seed)
    n = len(references)
    resamples = [(rng.integers(0, len(runs), len(runs)), rng.integers(0, n, n)) for _ in range(n_resamples)]
    scores = corpus_scores(translations["pretrained"][runs[0]], references)
    report: dict = {"n_seeds": len(runs), "runs": runs, "n_test_sentences": n,
                    "signatures": {metric: scores[f"{metric}_signature"] for metric in METRICS}, "gap": {},
                    "baseline": {}}
    boot: dict[str, dict[str, np.ndarray]] = {}
    for metric in METRICS:
        boot[metric] = {}
        for variant in VARIANTS:
            stats = [sentence_statistics(metric, translations[variant][r], references) for r in runs]
            per_run = [corpus_score(metric, st.sum(axis=0)) for st in stats]
            boot[metric][variant] = np.array([np.mean([corpus_score(metric, stats[r][idx].sum(axis=0)) for r in picked])
                                              for picked, idx in resamples])
            section = report.setdefault(variant, {})
            section[f"{metric}_per_seed"] = per_run
            section[f"{metric}_mean"] = float(np.mean(per_run))
            section[f"{metric}_std"] = float(np.std(per_run, ddof=1)) if len(per_run) > 1 else 0.0
            section[f"{metric}_ci95_low"], section[f"{metric}_ci95_high"] = _interval(boot[metric][variant])
        gaps = boot[metric]["pretrained"] - boot[metric]["scratch"]
        report["gap"][f"{metric}_mean"] = report["pretrained"][f"{metric}_mean"] - report["scratch"][f"{metric}_mean"]
        report["gap"][f"{metric}_ci95_low"], report["gap"][f"{metric}_ci95_high"] = _interval(gaps)
        report["gap"][f"{metric}_p_value"] = float((np.count_nonzero(gaps <= 0) + 1) / (len(gaps) + 1))
        report["baseline"][f"copy_source_{metric}"] = corpus_score(
            metric, sentence_statistics(metric, sources, references).sum(axis=0))
    for variant in VARIANTS:
        report[variant]["repeats_per_seed"] = [repeated_share(translations[variant][r]) for r in runs]
        report[variant]["repeats_mean"] = float(np.mean(report[variant]["repeats_per_seed"]))
    if first_epoch_bleu is not None:
        for variant in VARIANTS:
            report[variant]["first_epoch_val_bleu_mean"] = float(np.mean(first_epoch_bleu[variant]))
        report["gap"]["first_epoch_val_bleu_mean"] = (report["pretrained"]["first_epoch_val_bleu_mean"]
                                                      - report["scratch"]["first_epoch_val_bleu_mean"])
    return report


def lab_report(translations: dict[str, dict[str, list[str]]], sources: list[str], references: list[str]) -> dict:
    """The lab's sentences: each model's translation and sentence chrF, each variant's corpus chrF (mean over runs)."""
    chrf = CHRF()
    rows = [{"source": source, "reference": reference,
             **{f"{v}_{r}": translations[v][r][i] for v in VARIANTS for r in sorted(translations[v])},
             **{f"{v}_{r}_chrf": chrf.sentence_score(translations[v][r][i], [reference]).score
                for v in VARIANTS for r in sorted(translations[v])}}
            for i, (source, reference) in enumerate(zip(sources, references))]
    return {"n_sentences": len(sources),
            **{f"{v}_chrf_mean": float(np.mean([chrf.corpus_score(translations[v][r], [references]).score
                                                for r in translations[v]])) for v in VARIANTS},
            "sentences": rows}


def translation_headline(report: dict, pretraining: dict) -> dict:
    """The answer in flat numbers (`metrics/headline.json`), the short test sentences' as `clauses_*`."""
    gap = report["gap"]
    return {
        "bleu_pretrained": report["pretrained"]["bleu_mean"],
        "bleu_scratch": report["scratch"]["bleu_mean"],
        "gap": gap["bleu_mean"],
        "ci95_low": gap["bleu_ci95_low"],
        "ci95_high": gap["bleu_ci95_high"],
        "p_value": gap["bleu_p_value"],
        "chrf_pretrained": report["pretrained"]["chrf_mean"],
        "chrf_scratch": report["scratch"]["chrf_mean"],
        "bleu_copy_source": report["baseline"]["copy_source_bleu"],
        "repeats_pretrained": report["pretrained"]["repeats_mean"],
        "repeats_scratch": report["scratch"]["repeats_mean"],
        "lm_val_ppl": pretraining["val_perplexity"],
        "n_seeds": report["n_seeds"],
        "n_pretraining_runs": len({str(run).split("-")[0] for run in report["runs"]}),
        **({f"clauses_{k}": v for k, v in translation_headline(report["clauses"], pretraining).items()
            if k.startswith(("bleu", "chrf", "gap", "ci95"))} if "clauses" in report else {}),
        **({"lab_chrf_pretrained": report["lab"]["pretrained_chrf_mean"],
            "lab_chrf_scratch": report["lab"]["scratch_chrf_mean"]} if "lab" in report else {}),
    }


def report_lines(report: dict) -> list[str]:
    """The answer in a few lines (evaluate and `lmtransfer results --translation` print them)."""
    lines = [f"{v:>10}: test BLEU {report[v]['bleu_mean']:.2f} ± {report[v]['bleu_std']:.2f} "
             f"[{report[v]['bleu_ci95_low']:.2f}, {report[v]['bleu_ci95_high']:.2f}], chrF {report[v]['chrf_mean']:.2f} "
             f"± {report[v]['chrf_std']:.2f} over {report['n_seeds']} runs"
             + (f"; {report[v]['repeats_mean']:.1%} repeat a word 3+ times" if "repeats_mean" in report[v] else "")
             for v in VARIANTS]
    gap, base = report["gap"], report["baseline"]
    lines.append(f"  baseline: the source copied: BLEU {base['copy_source_bleu']:.2f}, chrF {base['copy_source_chrf']:.2f}")
    lines.append(f"       gap: BLEU {gap['bleu_mean']:+.2f}, 95% CI [{gap['bleu_ci95_low']:+.2f}, {gap['bleu_ci95_high']:+.2f}], "
                 f"p = {gap['bleu_p_value']:.4f}; chrF {gap['chrf_mean']:+.2f} [{gap['chrf_ci95_low']:+.2f}, "
                 f"{gap['chrf_ci95_high']:+.2f}]" + (f"; validation BLEU after epoch 1 {gap['first_epoch_val_bleu_mean']:+.2f}"
                                                     if "first_epoch_val_bleu_mean" in gap else ""))
    lines.append(f"            ({report['n_test_sentences']} test sentences; sacreBLEU {report['signatures']['bleu']})")
    if "clauses" in report:
        short = report["clauses"]
        lines.append(f"   clauses: {short['n_test_sentences']} short test sentences (the test verses' clause pairs):")
        lines += ["  " + line for line in report_lines(short)[:-1]]
    return lines
