"""Translation quality with sacreBLEU: corpus BLEU and chrF, each with the signature that makes it comparable.

Hypotheses and references are plain detokenised text; sacreBLEU applies its own
standard tokenisation (`13a` for BLEU, character n-grams for chrF). Scores are
comparable with other sacreBLEU numbers only when the signatures match, so the
signatures are kept beside the scores.
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float | str]:
    """BLEU and chrF of a whole test set (one reference per sentence), and their signatures."""
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
