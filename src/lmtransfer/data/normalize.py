"""Plain-text conventions shared by data preparation and tokenization."""

import re

PIECE_SPACE = "\u2581"  # sentencepiece's visible space, "▁"
_WHITESPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """One line, single spaces: tabs and newlines would break the TSV files downstream."""
    return _WHITESPACE.sub(" ", text).strip()


def dedup_key(text: str) -> str:
    """Two texts are the same document when they differ only in case and spacing."""
    return normalize_text(text).casefold()


def pieces_to_text(pieces: str) -> str:
    """`▁Un ▁petit ▁livre` -> `Un petit livre`: how sentencepiece pieces join back into text."""
    return "".join(pieces.split()).replace(PIECE_SPACE, " ").strip()
