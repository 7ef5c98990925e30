"""The user's own sentence pairs (data/pairs.py), tiny files in tmp_path: CSV/TSV/JSONL/Parquet, one message per
problem naming file, line and key, and the split rules (repeats, seeded carving, no held-out text in training)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from lmtransfer.core.errors import ConfigError, DataSourceError, EmptySplitError, InputFileError
from lmtransfer.translation.data.bible_en_fr import ParallelData
from lmtransfer.translation.data.pairs import carve_pairs, load_pair_files, read_pairs

from shipped import shipped

PAIRS = [("Hello, world.", "Bonjour, le monde."), ('He said "yes".', 'Il a dit "oui".'), ("Été", "Summer")]


def write(directory: Path, name: str, text: str | bytes) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def read(path: Path, key: str = "data.train", fmt: str = "auto", source: str = "source",
         target: str = "target", encoding: str = "utf-8") -> pd.DataFrame:
    return read_pairs(path, key, fmt, source, target, encoding)


def load(train: Path, valid: Path | str = "", test: Path | str = "", corpus: list[str] | None = None,
         valid_fraction: float = 0.1, test_fraction: float = 0.2, seed: int = 0) -> ParallelData:
    return load_pair_files(shipped("data", "translation", 
        source="files", train=str(train), valid=str(valid), test=str(test), corpus=corpus or [],
        valid_fraction=valid_fraction, test_fraction=test_fraction, seed=seed))


def texts(table: pd.DataFrame) -> list[tuple[str, str]]:
    return list(zip(table["source"], table["target"]))


def test_every_format_reads_the_same_pairs_and_newlines_inside_a_text(tmp_path):
    tsv = "source\ttarget\n" + "".join(f"{s}\t{t}\n" for s, t in PAIRS)
    csv = 'source,target\n"Hello, world.","Bonjour, le monde."\n"He said ""yes"".","Il a dit ""oui""."\nÉté,Summer\n'
    frames = {
        "tsv": read(write(tmp_path, "pairs.tsv", tsv)),
        "csv": read(write(tmp_path, "pairs.csv", csv)),
        "jsonl": read(write(tmp_path, "pairs.jsonl", jsonl([{"source": s, "target": t} for s, t in PAIRS]))),
    }
    pd.DataFrame({"source": [s for s, _ in PAIRS], "target": [t for _, t in PAIRS]}).to_parquet(tmp_path / "p.parquet")
    frames["parquet"] = read(tmp_path / "p.parquet")
    for fmt, frame in frames.items():
        assert list(frame.columns) == ["source", "target", "where"], fmt
        assert texts(frame) == PAIRS, fmt
    assert list(frames["csv"]["where"]) == ["line 2", "line 3", "line 4"] == list(frames["tsv"]["where"])
    assert list(frames["jsonl"]["where"]) == ["line 1", "line 2", "line 3"]
    assert list(frames["parquet"]["where"]) == ["row 1", "row 2", "row 3"]
    # a quoted CSV newline reads like JSONL's, and later lines keep their numbers
    csv = read(write(tmp_path, "a.csv", 'source,target\n"two\nlines, here","deux\nlignes"\nnext,suivant\n'))
    lines = read(write(tmp_path, "a.jsonl", jsonl([{"source": "two\nlines, here", "target": "deux\nlignes"},
                                                   {"source": "next", "target": "suivant"}])))
    assert texts(csv) == texts(lines) == [("two\nlines, here", "deux\nlignes"), ("next", "suivant")]
    assert list(csv["where"]) == ["line 2", "line 5"]  # the first record spans lines 2 to 4


def test_column_names_and_the_encoding_are_configurable_and_other_columns_are_ignored(tmp_path):
    tsv = write(tmp_path, "en-fr.txt", "id\ten\tfr\n1\tcat\tchat\n2\tdog\tchien\n")
    table = read(tsv, fmt="tsv", source="en", target="fr")
    assert texts(table) == [("cat", "chat"), ("dog", "chien")]
    swapped = read(write(tmp_path, "fr-en.jsonl", jsonl([{"fr": "chat", "en": "cat", "n": 1}])),
                   source="fr", target="en")
    assert texts(swapped) == [("chat", "cat")]
    latin = write(tmp_path, "latin.tsv", "source\ttarget\ncafé\tcoffee\n".encode("latin-1"))  # data.encoding
    assert texts(read(latin, encoding="latin-1")) == [("café", "coffee")]


BROKEN = [
    ("train.csv", "src,target\na,b\n",
     "train.csv: no column 'source' (data.source_column); the columns are: 'src', 'target' (set by data.train)"),
    ("train.jsonl", jsonl([{"source": "a", "target": "b"}, {"source": "c", "tgt": "d"}]),
     "train.jsonl, line 2: no field 'target' (data.target_column); the fields are: source, tgt (set by data.train)"),
    ("train.tsv", "source\ttarget\na\tb\n\tc\n\td\n",
     "train.tsv, line 3: empty source (2 rows like this in the file; set by data.train)"),
    ("train.csv", "source,target\na,b\nc,  \n",
     "train.csv, line 3: empty target (1 row like this in the file; set by data.train)"),
    ("train.tsv", "source\ttarget\na\tb\tc\n",
     "train.tsv, line 2: 3 fields but the header has 2 (is it really TSV? check data.format) (set by data.train)"),
    ("train.tsv", "source\ttarget\na\tb\x00c\n",
     "train.tsv, line 2: the text holds a NUL byte: binary data, or a file in another encoding than data.encoding "
     "(utf-8)? (set by data.train)"),
    ("train.jsonl", '{"source": "a", "target": "b"}\n["c", "d"]\n',
     "train.jsonl, line 2: expected a JSON object, got list (set by data.train)"),
    ("train.jsonl", '{"source": "a", "target": "b"}\n{"source": "c"\n',
     "train.jsonl, line 2: not valid JSON (Expecting ',' delimiter) (set by data.train)"),
    ("train.csv", "source,target\n", "train.csv: no sentence pairs (set by data.train)"),
    ("train.jsonl", "\n \n", "train.jsonl: no sentence pairs (set by data.train)"),
]


@pytest.mark.parametrize("name,content,message", BROKEN, ids=[m.split(": ", 1)[1][:40] for _, _, m in BROKEN])
def test_each_problem_is_one_message_naming_the_file_the_line_and_the_key(tmp_path, name, content, message):
    path = write(tmp_path, name, content)
    with pytest.raises(DataSourceError) as caught:
        read(path)
    assert str(caught.value) == f"{tmp_path}/{message}"


def numbered_pairs(count: int) -> list[tuple[str, str]]:
    """Two sources per target, so a carved pair's partner left in train shares its target."""
    return [(f"source {i}", f"target {i // 2}") for i in range(count)]


def tsv_of(pairs: list[tuple[str, str]]) -> str:
    return "source\ttarget\n" + "".join(f"{s}\t{t}\n" for s, t in pairs)


def test_carving_is_seeded_test_first_and_leaves_no_held_out_text_in_train_or_corpus(tmp_path):
    pairs = numbered_pairs(40)
    train = write(tmp_path, "train.tsv", tsv_of(pairs))
    data = load(train, valid_fraction=0.1, test_fraction=0.2, seed=3)
    assert len(data.splits["test"]) == 8 and len(data.splits["valid"]) == 4
    assert {name: texts(table) for name, table in data.splits.items()} == \
        {name: texts(table) for name, table in load(train, seed=3).splits.items()}
    assert texts(load(train, seed=4).splits["test"]) != texts(data.splits["test"])
    held = {pair for name in ("valid", "test") for pair in texts(data.splits[name])}
    assert len(held) == 12 and set(texts(data.splits["valid"])).isdisjoint(texts(data.splits["test"]))
    held_texts = {text for pair in held for text in pair}
    rest = [pair for pair in pairs if pair not in held]
    assert texts(data.splits["train"]) == [pair for pair in rest if pair[1] not in held_texts]
    assert data.removed == {"duplicates_train": 0, "train_pairs_also_in_valid_or_test": sum(
        pair[1] in held_texts for pair in rest), "corpus_lines_also_in_valid_or_test": 0}
    assert data.removed["train_pairs_also_in_valid_or_test"] > 0
    assert held_texts.isdisjoint(data.corpus)
    assert held_texts.isdisjoint(set(data.splits["train"]["source"]) | set(data.splits["train"]["target"]))


def test_test_is_carved_first_so_carving_valid_too_leaves_it_unchanged():
    pool = pd.DataFrame(numbered_pairs(20), columns=["source", "target"])
    alone = carve_pairs(pool, {"test": 0.25}, seed=1)
    both = carve_pairs(pool, {"test": 0.25, "valid": 0.25}, seed=1)
    assert texts(alone["test"]) == texts(both["test"]) and len(both["valid"]) == 5
    assert sorted(texts(both["train"]) + texts(both["valid"])) == sorted(texts(alone["train"]))
    assert list(both["train"].index) == list(range(10))
    assert texts(both["train"]) == sorted(texts(both["train"]), key=lambda pair: int(pair[0].split()[1]))


def test_repeated_train_pairs_are_dropped_and_counted_after_whitespace_is_normalised(tmp_path):
    train = write(tmp_path, "train.tsv", tsv_of([("a cat", "un chat"), ("a  cat ", " un chat"), ("a cat", "un chat"),
                                                 ("A cat", "un chat"), ("a dog", "un\u00a0chien")]))
    valid = write(tmp_path, "valid.tsv", tsv_of([("one", "un")]))
    test = write(tmp_path, "test.tsv", tsv_of([("two", "deux")]))
    data = load(train, valid, test)
    assert texts(data.splits["train"]) == [("a cat", "un chat"), ("A cat", "un chat"), ("a dog", "un chien")]
    assert data.removed["duplicates_train"] == 2


def test_given_valid_and_test_are_kept_as_given_and_train_loses_every_pair_sharing_a_text(tmp_path):
    train = write(tmp_path, "train.tsv", tsv_of([("red", "rouge"), ("blue", "bleu"), ("green", "vert"),
                                                 ("sky", "ciel"), ("grey", "gris")]))
    valid_pairs = [("blue", "azur"), ("blue", "azur"), ("sea", "mer")]
    test_pairs = [("sea", "mer"), ("the sky", "ciel")]
    valid = write(tmp_path, "valid.tsv", tsv_of(valid_pairs))
    test = write(tmp_path, "test.csv", "source,target\n" + "".join(f"{s},{t}\n" for s, t in test_pairs))
    data = load(train, valid, test, valid_fraction=0.5, test_fraction=0.3)
    assert texts(data.splits["valid"]) == valid_pairs and texts(data.splits["test"]) == test_pairs
    assert texts(data.splits["train"]) == [("red", "rouge"), ("green", "vert"), ("grey", "gris")]
    assert data.removed["train_pairs_also_in_valid_or_test"] == 2


def test_a_missing_valid_split_is_carved_while_the_given_test_is_kept(tmp_path):
    train = write(tmp_path, "train.tsv", tsv_of(numbered_pairs(20)))
    test = write(tmp_path, "test.jsonl", jsonl([{"source": "x", "target": "target 0"}]))
    data = load(train, test=test, valid_fraction=0.25, test_fraction=0.5, seed=2)
    assert texts(data.splits["test"]) == [("x", "target 0")] and len(data.splits["valid"]) == 5
    assert "target 0" not in set(data.splits["train"]["target"])


def test_the_corpus_files_join_the_train_pairs_without_held_out_lines(tmp_path):
    train = write(tmp_path, "train.tsv", tsv_of([("red", "rouge"), ("blue", "bleu")]))
    valid = write(tmp_path, "valid.tsv", tsv_of([("sea", "mer")]))
    test = write(tmp_path, "test.tsv", tsv_of([("sky", "ciel")]))
    write(tmp_path, "mono/a.txt", "A first line.\n\n  mer \nA\tsecond  line.\n")
    write(tmp_path, "mono/deep/b.txt", "ciel\nUne ligne.\n")
    write(tmp_path, "extra.txt", "Extra line.\n")
    data = load(train, valid, test, corpus=[f"{tmp_path}/mono/**/*.txt", str(tmp_path / "extra.txt")])
    assert data.corpus == ["red", "blue", "rouge", "bleu", "A first line.", "A second line.", "Une ligne.",
                           "Extra line."]
    assert data.removed["corpus_lines_also_in_valid_or_test"] == 2


def ten_pairs(folder: Path) -> Path:
    return write(folder, "train.tsv", tsv_of(numbered_pairs(10)))


REFUSED = {  # what is read: the error, its message
    "the key of the file read": (lambda d: read(write(d, "dev.csv", 'source,target\n"a,b\n'), key="data.valid"),
                                 DataSourceError, r"dev\.csv, line 2: not valid CSV.*\(set by data\.valid\)$"),
    "one column for both sides": (lambda d: read(write(d, "train.tsv", "source\ttarget\na\tb\n"), target="source"),
                                  ConfigError, r"data\.source_column and data\.target_column are both 'source'"),
    "two keys naming one file": (lambda d: load(ten_pairs(d), test=d / "train.tsv"), DataSourceError,
                                 r"train\.tsv: data\.test and data\.train name the same file"),
    "an empty file": (lambda d: load(ten_pairs(d), valid=write(d, "valid.tsv", "")), InputFileError,
                      r"valid\.tsv: the file is empty \(set by data\.valid\)"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_refusal_names_the_file_and_its_key(tmp_path, case):
    attempt, error, message = REFUSED[case]
    with pytest.raises(error, match=message):
        attempt(tmp_path)


def test_fractions_that_carve_everything_are_refused_naming_the_keys(tmp_path):
    train = write(tmp_path, "train.tsv", tsv_of([("a", "b"), ("c", "d"), ("e", "f")]))
    with pytest.raises(EmptySplitError, match=re.escape(
            f"split 'train' is empty: of the 3 distinct pairs of data.train ({train}), 3 were carved out as "
            "valid/test and 0 share a text with valid/test; give more pairs or lower data.valid_fraction / "
            "data.test_fraction")):
        load(train, valid_fraction=0.4, test_fraction=0.5)
    with pytest.raises(EmptySplitError, match=r"split 'valid' is empty: data\.valid_fraction 0\.1 of the 3 distinct "
                                              r"pairs of data\.train .* give data\.valid a file"):
        load(train, valid_fraction=0.1, test_fraction=0.34)
