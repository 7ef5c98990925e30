"""`data.corpus`: unlabeled text in place of a source's own, from files (`data.source: files`) or a pinned corpus
named by its key (any source). Its texts are streamed, never held; `prepare` removes every valid and test text."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from lmtransfer.classification.config import NAMED_CORPORA, DataParams
from lmtransfer.data.files import CorpusFiles, expand_corpus
from lmtransfer.classification.data.imdb_release import ACL_IMDB_V1, ReviewLines, imdb_reviews

IMDB_CORPUS_FOLDERS = ("train/unsup", "train/pos", "train/neg")  # never test/: IMDb's test reviews stay unseen


def imdb_corpus(params: DataParams) -> ReviewLines:
    """The 75,000 reviews of IMDb's train and unlabeled folders, as the release orders them."""
    kept = imdb_reviews(params.imdb_from)
    return ReviewLines([kept / ACL_IMDB_V1.folder(name).kept_as for name in IMDB_CORPUS_FOLDERS])


LOADERS: dict[str, Callable[[DataParams], Iterable[str]]] = {"imdb-reviews": imdb_corpus}
PINS: dict[str, str] = {"imdb-reviews": ACL_IMDB_V1.digest}  # what the validate stage records for each
assert set(LOADERS) == set(NAMED_CORPORA)


@dataclass
class Corpus:
    """A re-iterable chain of the corpora `data.corpus` names, in its order; `paths`: its files (for the manifest)."""

    parts: list[Iterable[str]]
    paths: list[Path] = field(default_factory=list)
    named: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[str]:
        return itertools.chain.from_iterable(self.parts)

    def manifest(self) -> list[dict[str, Any]]:
        """The validate stage's record of the named corpora (the files are recorded by their bytes)."""
        return [{"key": "data.corpus", "path": name, "bytes": 0, "sha256": PINS[name]} for name in self.named]


def corpus_of(params: DataParams) -> Corpus:
    """Every entry of `data.corpus`: a named corpus fetched and checked, files and globs expanded (each checked)."""
    parts: list[Iterable[str]] = []
    paths: list[Path] = []
    for entry in params.corpus:
        if entry in LOADERS:
            parts.append(LOADERS[entry](params))
        else:
            files = expand_corpus([entry])
            paths += files
            parts.append(CorpusFiles(files, params.encoding))
    return Corpus(parts, paths, [entry for entry in params.corpus if entry in LOADERS])
