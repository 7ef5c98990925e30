"""What every data source (`sources.SOURCES`) hands to `prepare`: labeled tables, an unlabeled corpus, their formats."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd


@dataclass
class RawData:
    splits: dict[str, pd.DataFrame]  # 'train' always; 'valid'/'test' when the source fixes them. text, label: str
    corpus: Iterable[str]  # unlabeled documents; re-iterable and streamed (never assumed to fit in memory)
    label_names: list[str] | None = None  # a fixed class order; None = inferred from the labels
    labeled_pieces: bool = False  # texts are space-separated sentencepiece pieces, not raw text
    corpus_pieces: bool = False
    origins: dict[str, str] = field(default_factory=dict)  # split -> the file it came from, for messages
    archive_sha256: str = ""  # a built-in's pinned archive
