"""Clause pairs: of bible-en-fr's 27,883 training pairs only 372 are 16 tokens or shorter a side, so a pair whose
sides split at clause punctuation into as many pieces is also added piece by piece, when each piece pair's length
ratio lies in `RATIO_RANGE` (the 1st to 99th percentile of whole verses). evaluate scores the test verses' own."""

from __future__ import annotations

import re
from collections.abc import Iterable

import pandas as pd

RATIO_RANGE = (0.67, 1.52)
_CLAUSE_END = re.compile(r"(?<=[.;:?!])\s+|(?<=[.;:?!][\"'”’»)])\s+")


def split_clauses(text: str) -> list[str]:
    """`text` cut after each clause punctuation mark that a space follows."""
    return [piece for piece in _CLAUSE_END.split(text.strip()) if piece]


def clause_pieces(source: str, target: str) -> list[tuple[str, str]]:
    """The pair's aligned clause pairs, or [] when the sides split differently or a piece's ratio is off."""
    sources, targets = split_clauses(source), split_clauses(target)
    if len(sources) < 2 or len(sources) != len(targets):
        return []
    low, high = RATIO_RANGE
    if not all(low <= len(t) / len(s) <= high for s, t in zip(sources, targets)):
        return []
    return list(zip(sources, targets))


def pieces_of(sources: Iterable[str], targets: Iterable[str]) -> list[tuple[str, str]]:
    return [piece for source, target in zip(sources, targets) for piece in clause_pieces(source, target)]


def add_clause_pairs(train: pd.DataFrame, held_out: Iterable[str]) -> tuple[pd.DataFrame, dict[str, int]]:
    """`train` (`source`, `target`) followed by its clause pairs that are new and share no text with `held_out`,
    and the counts (pieces added, pieces left out as held out)."""
    cut = pd.DataFrame(pieces_of(train["source"], train["target"]), columns=["source", "target"])
    cut = cut.drop_duplicates(ignore_index=True)
    held = set(held_out)
    leaks = cut["source"].isin(held) | cut["target"].isin(held)
    known = pd.MultiIndex.from_frame(train[["source", "target"]])
    repeats = pd.MultiIndex.from_frame(cut).isin(known)
    added = cut[~leaks & ~repeats]
    counts = {"clause_pairs_added": len(added), "clause_pieces_also_in_valid_or_test": int(leaks.sum())}
    return pd.concat([train[["source", "target"]], added], ignore_index=True), counts


def short_test_pairs(held_out: pd.DataFrame, train: pd.DataFrame) -> list[tuple[str, str]]:
    """The held-out pairs' distinct clause pairs, less those with a side that is a training text ("and it was so.")."""
    seen = set(train["source"]) | set(train["target"])
    pieces = pieces_of(held_out["source"], held_out["target"])
    return list(dict.fromkeys((s, t) for s, t in pieces if s not in seen and t not in seen))
