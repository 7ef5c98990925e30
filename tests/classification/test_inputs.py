"""Bring-your-own data, the validate stage, and broken inputs: one line naming file, line and key (tiny files)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lmtransfer.classification.config import parse_classification_params
from lmtransfer.classification.data.prepare import prepare, prepare_labeled, write_prepared
from lmtransfer.classification.data.sources import load_source
from lmtransfer.classification.inputs import check_inputs, design_cost
from lmtransfer.core.config import ConfigError
from lmtransfer.core.errors import DataSourceError, EmptySplitError, InputFileError, SplitError, TokenizerError
from lmtransfer.core.paths import INPUTS
from lmtransfer.data.prepared import read_corpus_meta, read_split
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.modeling.model import LanguageModel, ModelConfig
from lmtransfer.pretraining.checkpoint_import import CheckpointImportError
from lmtransfer.tokens.encode_splits import tokenize_prepared
from lmtransfer.tokens.tokenizer import DictionaryTokenizer, read_fairseq_dictionary

from shipped import shipped_raw

REPO = Path(__file__).resolve().parents[2]


def write(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


def csv_text(rows: list[tuple[str, str]], header: str = "text,label", sep: str = ",") -> str:
    return header + "\n" + "".join(f"{text}{sep}{label}\n" for text, label in rows)


def write_csv(path: str | Path, rows: list[tuple[str, str]], **kwargs) -> Path:
    return write(path, csv_text(rows, **kwargs))


def reviews(labels: list[str], per_class: int, prefix: str = "review") -> list[tuple[str, str]]:
    """Distinct texts, `per_class` of each label, classes interleaved."""
    return [(f"{prefix} {label} number {i} of the film", label) for i in range(per_class) for label in labels]


def files_params(tokenizer: dict | None = None, pretrain: dict | None = None, model: dict | None = None, **data):
    """ClassificationParams for files written by a test: a handful of lines, so short windows and a tiny vocabulary."""
    raw = {"data": {"source": "files", **data}, "tokenizer": {"vocab_size": 30, **(tokenizer or {})},
           "pretrain": {"seq_len": 4, **(pretrain or {})}, "model": model or {}}
    return parse_classification_params(shipped_raw(raw))


def entries_of(manifest: dict) -> list[dict]:
    """Every entry of check_inputs' result, in order, whether it is one list or one list per reading stage."""
    return [entry for entries in manifest.values() for entry in entries]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


DICTIONARY_PIECES = ["▁Un", "▁petit", "▁livre", "▁très", "▁bon", "▁mauvais", "▁film", "."]
UNKNOWN_PIECE = "▁inconnu"


def dictionary(pieces: list[str] = DICTIONARY_PIECES) -> str:
    return "".join(f"{piece} {100 - i}\n" for i, piece in enumerate(pieces))


def write_pieces_data() -> None:
    """train.spm (space-separated pieces, 20 lines) and the parallel train.label (1 / 0 per line)."""
    texts = []
    for i in range(10):
        repeat, unknown = " ".join(["▁très"] * (i + 1)), f" {UNKNOWN_PIECE}" if i % 3 == 0 else ""
        texts += [f"▁Un ▁petit ▁livre {repeat} ▁bon .", f"▁Un {repeat} ▁mauvais ▁film{unknown} ."]
    write("train.spm", "\n".join(texts) + "\n")
    write("train.label", "1\n0\n" * 10)


def pieces_params():
    return files_params(train="train.spm", format="pieces", tokenizer={"vocab_file": "dict.txt"})


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DVC_ROOT", raising=False)


def relabeled(labels: list[str], changes: dict[int, str]) -> str:
    """A CSV of `reviews(labels, 6)` with the labels of some rows spelled otherwise."""
    return csv_text([(text, changes.get(i, label)) for i, (text, label) in enumerate(reviews(labels, 6))])


def jsonl(labels: list) -> str:
    return "".join(json.dumps({"text": f"film {i}", "label": label}) + "\n" for i, label in enumerate(labels))


R6, R10 = csv_text(reviews(["pos", "neg"], 6)), csv_text(reviews(["pos", "neg"], 10))
LIST_TEXT = [json.dumps({"text": f"film {i}", "label": i % 2}) for i in range(6)]
LIST_TEXT[2] = json.dumps({"text": ["quite", "ending"], "label": 0})
STRAY_QUOTE = [f"review {i} of the film,{i % 2}" for i in range(2000)]
STRAY_QUOTE[1000] = '"review with a stray quote,1'  # file line 1002 (the header is line 1): opens a field
UTF16_CSV = "text,label\n" + "".join(f"film number {i},{'pos' if i % 2 else 'neg'}\n" for i in range(20))
UTF16_JSONL = "".join(json.dumps({"text": f"film {i}", "label": "pos" if i % 2 else "neg"}) + "\n" for i in range(20))
NUMBER_TEXTS = pd.DataFrame({"text": np.arange(10, dtype=np.int64), "label": [0, 1] * 5}).to_parquet()
ONE_NEUTRAL = reviews(["pos", "neg"], 150)
ONE_NEUTRAL.insert(40, ("a lukewarm film neither good nor bad", "neutral"))  # file line 42
CORPUS_60 = "".join(f"corpus line number {i}\n" for i in range(60))

# Each bad input: (files written, data.* keys, error, its one line). str is written as UTF-8, bytes as they are.
FILE_FAULTS = [
    ({}, {"train": "nope.csv"}, InputFileError, r"nope\.csv: file not found \(set by data\.train\)"),
    ({"train.csv": R6}, {"corpus": ["corpus/*.txt"]}, DataSourceError,
     r"corpus/\*\.txt: no file matches this pattern \(set by data\.corpus\)"),
    ({"train.csv": b""}, {}, InputFileError, r"train\.csv: the file is empty \(set by data\.train\)"),
    ({"train.csv": "text,label\ngood film,pos\nun café horrible,neg\nbad film,neg\n".encode("latin-1")}, {},
     DataSourceError, r"train\.csv, line 3: not valid utf-8 text.*data\.encoding"),
    ({"train.csv": R6, "corpus.txt": "fine line\nanother\ncafé au lait\n".encode("latin-1")}, {"corpus": "corpus.txt"},
     DataSourceError, r"corpus\.txt, line 3: not valid utf-8 text.*data\.corpus"),
    ({"train.csv": R6}, {"text_column": "review"}, DataSourceError,
     r"train\.csv: no column 'review' \(data\.text_column\); the columns are: 'text', 'label'"),
    ({"train.csv": R6}, {"label_column": "stars"}, DataSourceError,
     r"train\.csv: no column 'stars' \(data\.label_column\); the columns are: 'text', 'label'"),
    ({"train.csv": csv_text(reviews(["pos", "neg"], 6), "text,label ")}, {}, DataSourceError,
     r"no column 'label' \(data.label_column\); the columns are: 'text', 'label '$"),
    ({"train.jsonl": '{"text": "a", "label": "pos"}\n{"text": "b", "sentiment": "neg"}\n'}, {"train": "train.jsonl"},
     DataSourceError, r"train\.jsonl, line 2: no field 'label' \(data\.label_column\)"),
    ({"train.csv": "text,label\ngood film,pos\nbad film,neg\n,pos\nfine film,pos\n"}, {}, DataSourceError,
     r"train\.csv, line 4: empty text .*data\.train"),
    ({"train.csv": 'text,label\n"a review\nover two lines",pos\n\nbad film,neg\n,pos\n'}, {}, DataSourceError,
     r"train\.csv, line 6: empty text"),  # its real line, after a quoted field of two
    ({"train.csv": R6, "test.csv": csv_text([("only positive one", "pos"), ("only positive two", "pos")])},
     {"test": "test.csv"}, SplitError,
     r"split 'test' has a single class \('pos', 2 examples; data\.test \(test\.csv\)\)"),
    ({"train.csv": csv_text(reviews(["pos"], 10))}, {}, SplitError,
     r"split 'train' has a single class \('pos'.*data\.train \(train\.csv\)"),
    ({"train.txt": "text,label\na,pos\nb,neg\n"}, {"train": "train.txt"}, DataSourceError,
     r"train\.txt: cannot tell the format from the extension '\.txt'.*set data\.format"),
    ({"train.csv": R6, "test.csv": csv_text([("test one", "pos"), ("test two", "neg"), ("test three", "maybe")])},
     {"test": "test.csv"}, SplitError, r"split 'test' \(test\.csv\) has label\(s\) \['maybe'\]"),
    ({"train.jsonl": '{"text": "a", "label": 1}\n{"text": "b", "label": 0\n'}, {"train": "train.jsonl"},
     DataSourceError, r"train\.jsonl, line 2: not valid JSON"),
    ({"train.csv": relabeled(["pos", "neg"], {3: "NaN", 7: "null"})}, {}, DataSourceError,
     r"train\.csv, line 5: missing label 'NaN' \(2 rows like this"),
    ({"train.jsonl": "\n".join(LIST_TEXT) + "\n"}, {"train": "train.jsonl"}, DataSourceError,
     r"train\.jsonl, line 3: the text \(data\.text_column 'text'\) is a list, not a string"),
    ({"train.csv": R10, "corpus.txt": "a line\nanother line\nbroken \x00 line\n"}, {"corpus": ["corpus.txt"]},
     DataSourceError, r"corpus\.txt, line 3: holds a NUL byte"),
    ({"train.csv": "text,label,text\n" + "".join(f"film {i},{i % 2},again {i}\n" for i in range(8))}, {},
     DataSourceError, r"train\.csv, line 1: the header names column 'text' more than once \(columns 1, 3\)"),
    ({"train.csv": "text,label\n" + "\n".join(STRAY_QUOTE) + "\n"}, {}, DataSourceError,
     r"train\.csv, line 1002: not valid CSV \(reading on to line 2001\)"),
    ({"train.csv": R10}, {"valid": "./train.csv"}, DataSourceError,
     r"train\.csv: data\.valid and data\.train name the same file"),
    ({"train.csv": gzip.compress(b"text,label\nfilm,1\n")}, {}, DataSourceError,
     r"train\.csv: the file looks gzip-compressed, not text \(set by data\.train\); decompress it first"),
    ({"train.csv": UTF16_CSV.encode("utf-16-le")}, {}, DataSourceError,
     r"train\.csv: the text is UTF-16-LE .* set data.encoding: utf-16-le"),
    ({"train.jsonl": UTF16_JSONL.encode("utf-16-le")}, {"train": "train.jsonl"}, DataSourceError,
     r"train\.jsonl: the text is UTF-16-LE .* set data.encoding: utf-16-le"),
    ({"train.csv": R10}, {"encoding": "utf-16"}, DataSourceError,
     r"train\.csv, line 1: not valid utf-16 text .*utf-16-le or utf-16-be"),
    ({"odd.csv": "text,label\nfilm,1\n".encode("utf-16-le") + b"x"}, {"train": "odd.csv", "encoding": "utf-16-le"},
     DataSourceError, r"odd\.csv, line 3: not valid utf-16-le text \(the file ends in the middle of a character\)"),
    ({"train.parquet": NUMBER_TEXTS}, {"train": "train.parquet"}, DataSourceError,
     r"train\.parquet, row 1: the text \(data\.text_column 'text'\) is a number \(0\), not a string: is "
     r"data\.text_column the column"),
    ({"train.tsv": "id\tlabel\n" + "".join(f"{i}\t{i % 2}\n" for i in range(10))},
     {"train": "train.tsv", "text_column": "id"}, DataSourceError,
     r"train\.tsv, line 2: every text of data\.text_column 'id' is a number"),
    ({"train.csv": R10, "test.csv": R10}, {"test": "test.csv"}, SplitError,
     r"data\.train \(train\.csv\): all 20 of its texts are also in data\.test \(test\.csv\), so none is left to "
     r"train on"),
    ({"train.csv": csv_text(ONE_NEUTRAL)}, {}, SplitError,
     r"^train\.csv, line 42: class 'neutral' has too few examples to be in every split .*the (test|valid) split "
     r"has none"),
    ({"train.csv": R6}, {"pretrain": {"init_from": "models/old.pt", "seeds": [0]}}, InputFileError,
     r"models/old\.pt: file not found \(set by pretrain\.init_from\)"),
    ({"train.csv": R6}, {"add_train_to_corpus": False}, EmptySplitError,
     r"pretraining corpus has 0 usable lines.*data\.corpus"),
    # one line in 50 is held out (corpus_valid_fraction 0.02): lines 0 and 49, of 20 and 21 characters
    ({"train.csv": R10, "corpus.txt": CORPUS_60}, {"corpus": ["corpus.txt"], "pretrain": {"seq_len": 400},
                                                   "add_train_to_corpus": False}, ConfigError,
     r"^the corpus's valid part has 2 lines of 41 characters in all, at most 127 tokens: fewer than "
     r"pretrain\.seq_len \+ 1 = 401; lower pretrain\.seq_len or add text$"),
    ({"train.csv": R10}, {"tokenizer": {"vocab_size": 4000}}, TokenizerError,
     r"^tokenizer\.vocab_size=4000 is too large for this corpus: sentencepiece can make at most 34 pieces of it; "
     r"lower tokenizer\.vocab_size or add text$"),
    ({"train.csv": relabeled(["pos", "neg"], {6: "Pos"})}, {}, DataSourceError,  # 'Pos': file line 8
     r"labels 'pos' \(train\.csv, line 2\) and 'Pos' \(train\.csv, line 8\) differ only in case .* set "
     r"data\.label_case: fold"),
    ({"train.csv": relabeled(["caf\u00e9", "bar"], {4: "cafe\u0301"})}, {}, DataSourceError,  # decomposed
     "differ only in case or Unicode form"),
    ({"train.csv": R10}, {"tokenizer": {"vocab_size": 16}}, TokenizerError,
     r"^tokenizer\.vocab_size=16 is too small for this corpus: its characters and the special pieces need at least "
     r"\d+; raise tokenizer\.vocab_size"),
]


@pytest.mark.parametrize("files, data, error, message", FILE_FAULTS)
def test_a_bad_input_file_stops_validate_in_one_line_naming_the_file_and_the_key(files, data, error, message):
    for name, content in files.items():
        Path(name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    with pytest.raises(error, match=message):
        check_inputs(files_params(**{"train": "train.csv", **data}))


@pytest.mark.parametrize("dict_text, labels, error, message", [
    ("▁Un 10\n▁petit 9\n▁livre\n▁bon 7\n", None, TokenizerError,
     r"dict\.txt, line 3: expected '<piece> <count>'.*tokenizer\.vocab_file"),
    ("▁Un 10\n▁petit many\n", None, TokenizerError, r"dict\.txt, line 2: expected '<piece> <count>'"),
    ("▁Un 10\n▁petit 9\n▁livre 8\n▁Un 7\n", None, TokenizerError, r"dict\.txt, line 4: the piece '▁Un' repeats line 1"),
    ("▁Un 10\n<pad> 9\n▁livre 8\n", None, TokenizerError, r"dict\.txt, line 2.*<pad>"),
    (None, None, InputFileError, r"dict\.txt: file not found \(set by tokenizer\.vocab_file\)"),
    (dictionary([f"▁w{i}" for i in range(46)]), None, TokenizerError,  # a dictionary made for other files
     r"100% of the pieces of the first \d+ labeled train texts are not in tokenizer\.vocab_file=dict\.txt \(each "
     r"would become the unknown id\)"),
    (dictionary(), "1\n0\n1\n0\n", DataSourceError, r"train\.label: 4 labels but train\.spm has 20 lines"),
])
def test_a_bad_or_foreign_dictionary_or_a_short_label_file_stops_validate_in_one_line(dict_text, labels, error,
                                                                                       message):
    write_pieces_data()
    if dict_text is not None:
        write("dict.txt", dict_text)
    if labels is not None:
        write("train.label", labels)
    with pytest.raises(error, match=message):
        check_inputs(pieces_params())


def test_csv_with_custom_columns_and_three_string_classes_is_carved_stratified(tmp_path):
    rows = reviews(["pos", "neg", "neutral"], per_class=10)
    write_csv("reviews.csv", rows, header="review,stars")
    params = files_params(train="reviews.csv", text_column="review", label_column="stars")
    prepared = prepare(load_source(params.data), params.data)
    assert prepared.label_names == ["neg", "neutral", "pos"]
    sizes = {name: split["label"].value_counts().sort_index().tolist() for name, split in prepared.splits.items()}
    # per class: round(10 * 0.2) = 2 test, round(10 * 0.1) = 1 valid, the other 7 train
    assert sizes == {"train": [7, 7, 7], "valid": [1, 1, 1], "test": [2, 2, 2]}
    all_texts = [t for split in prepared.splits.values() for t in split["text"]]
    assert sorted(all_texts) == sorted(text for text, _ in rows)  # a partition: nothing lost, nothing twice
    for split in prepared.splits.values():  # the label ids still match the text's class
        for text, label in zip(split["text"], split["label"]):
            assert text.split()[1] == prepared.label_names[label]
    meta = write_prepared(load_source(params.data), params.data, tmp_path / "prepared", "files")
    on_disk = json.loads((tmp_path / "prepared" / "meta.json").read_text(encoding="utf-8"))
    assert on_disk == meta and on_disk["label_names"] == ["neg", "neutral", "pos"]
    assert on_disk["examples_per_class"] == {name: {"neg": n, "neutral": n, "pos": n} for name, n in
                                             (("train", 7), ("valid", 1), ("test", 2))}
    assert on_disk["examples"] == {"train": 21, "valid": 3, "test": 6}
    assert read_split(tmp_path / "prepared", "test")["label"].tolist() == prepared.splits["test"]["label"].tolist()


def test_jsonl_parquet_and_tsv_splits_are_read_and_train_loses_texts_of_test():
    train = [{"text": f"train text {i}", "label": 2 if i % 2 else 10} for i in range(8)]
    train.append({"text": "Shared   TEXT in two splits", "label": 2})  # also in test (case/space differ)
    write("train.jsonl", "".join(json.dumps(row) + "\n" for row in train))
    pd.DataFrame({"text": [f"valid text {i}" for i in range(4)], "label": [2, 10, 2, 10]}).to_parquet("valid.parquet")
    write_csv("test.tsv", [("test text 0", "2"), ("test text 1", "10"), ("shared text in two splits", "2")],
              header="text\tlabel", sep="\t")
    params = files_params(train="train.jsonl", valid="valid.parquet", test="test.tsv")
    raw = load_source(params.data)
    assert {name: len(table) for name, table in raw.splits.items()} == {"train": 9, "valid": 4, "test": 3}
    assert raw.splits["valid"]["label"].tolist() == ["2", "10", "2", "10"]  # Parquet ints read as class names
    labeled = prepare_labeled(raw, params.data)
    assert labeled.label_names == ["2", "10"]  # numeric order, not "10" < "2"
    assert (labeled.removed["train_texts_also_in_valid_or_test"], labeled.removed["duplicates_train"]) == (1, 0)
    assert {name: len(split) for name, split in labeled.splits.items()} == {"train": 8, "valid": 4, "test": 3}
    assert "Shared TEXT in two splits" not in set(labeled.splits["train"]["text"])
    assert labeled.splits["test"]["label"].tolist() == [0, 1, 0]


def test_pieces_with_a_fairseq_dictionary_pass_validate_tokenize_to_its_ids_and_ignore_a_corpus_change(tmp_path):
    write_pieces_data()
    write("dict.txt", dictionary())
    params = pieces_params()
    manifest = check_inputs(params)
    assert [(e["key"], Path(e["path"]).name) for e in entries_of(manifest)] == [
        ("data.train", "train.spm"), ("data.train", "train.label"), ("tokenizer.vocab_file", "dict.txt")]
    prepared_meta = write_prepared(load_source(params.data), params.data, tmp_path / "prepared", "files")
    assert prepared_meta["labeled_format"] == read_corpus_meta(tmp_path / "prepared")["corpus_format"] == "pieces"
    meta = tokenize_prepared(tmp_path / "prepared", tmp_path / "tokenized", params.tokenizer, warn=lambda line: None)
    assert (meta["scheme"], meta["vocab_size"]) == ("dictionary", len(DICTIONARY_PIECES) + 4)
    assert (meta["bos_id"], meta["pad_id"], meta["eos_id"], meta["unk_id"]) == (0, 1, 2, 3)
    on_disk = json.loads((tmp_path / "tokenized" / "meta.json").read_text(encoding="utf-8"))
    assert on_disk["pad_id"] == 1 and set(on_disk["unknown_rate"]) == {"train", "valid", "test"}
    corpus_meta = json.loads((tmp_path / "tokenized_corpus" / "meta.json").read_text(encoding="utf-8"))
    assert set(corpus_meta["unknown_rate"]) == {"corpus_train", "corpus_valid"}
    assert set(meta["unknown_rate"]) == {"corpus_train", "corpus_valid", "train", "valid", "test"}  # the log's view
    expected_id = {piece: 4 + index for index, piece in enumerate(DICTIONARY_PIECES)}
    for name in ("train", "valid", "test"):
        texts = read_split(tmp_path / "prepared", name)
        with np.load(tmp_path / "tokenized" / f"{name}.npz") as data:
            ids, offsets, labels = data["ids"], data["offsets"], data["labels"]
        assert labels.tolist() == texts["label"].tolist()
        pieces = [p for text in texts["text"] for p in text.split()]
        for index, text in enumerate(texts["text"]):
            sequence = ids[offsets[index] : offsets[index + 1]].tolist()  # <sos>, then unknown -> 3 (<oov>)
            assert sequence == [0] + [expected_id.get(p, 3) for p in text.split()]
        assert on_disk["unknown_rate"][name] == round(sum(p == UNKNOWN_PIECE for p in pieces) / len(pieces), 6)
    assert on_disk["unknown_rate"]["train"] > 0
    assert np.load(tmp_path / "tokenized_corpus" / "corpus_train.npy")[0] == 0
    outputs = {}  # what DVC compares: a corpus edit must not rerun the stages reading the labeled data
    for corpus in ("▁Un ▁petit ▁film\n▁Un ▁livre\n▁très ▁bon\n", "▁mauvais ▁film\n▁Un ▁bon ▁livre\n. ▁Un\n"):
        Path("corpus.spm").write_text(corpus, encoding="utf-8")
        params = files_params(train="train.spm", format="pieces", corpus=["corpus.spm"], corpus_format="pieces",
                              tokenizer={"vocab_file": "dict.txt"})
        write_prepared(load_source(params.data), params.data, tmp_path / "prepared", "files")
        tokenize_prepared(tmp_path / "prepared", tmp_path / "tokenized", params.tokenizer, warn=lambda line: None)
        outputs[corpus] = {name: snapshot(tmp_path / name) for name in
                           ("prepared", "prepared_corpus", "tokenized", "tokenized_corpus")}
    first, second = outputs.values()
    assert first["prepared"] == second["prepared"] and first["tokenized"] == second["tokenized"]
    assert first["prepared_corpus"] != second["prepared_corpus"]
    assert first["tokenized_corpus"]["corpus_train.npy"] != second["tokenized_corpus"]["corpus_train.npy"]


def test_a_fairseq_overwrite_flag_is_kept_and_a_49997_line_dictionary_gives_vocab_50001_and_the_summary_totals(capsys):
    write("dup.txt", "▁Un 10\n▁petit 9\n▁Un 7 #fairseq:overwrite\n")
    tokenizer = DictionaryTokenizer(read_fairseq_dictionary(Path("dup.txt")))
    assert tokenizer.vocab_size == 7 and tokenizer.piece_id("▁Un") == 6  # fairseq: the later line wins
    path = write("dict.txt", "".join(f"p{i} {50000 - i}\n" for i in range(49_997)))
    assert DictionaryTokenizer(read_fairseq_dictionary(path)).vocab_size == 50_001
    from lmtransfer.cli.main import main

    main(["summary", "--vocab-file", str(path), "--d-model", "200", "--n-layers", "4", "--d-ff", "200",
          "--n-heads", "2"])
    out = capsys.readouterr().out
    assert "V=50001" in out and "10,968,602" in out and "21,018,401" in out  # classifier, language model totals


def test_a_corpus_glob_streams_every_file_and_held_out_texts_stay_out_of_the_corpus():
    write_csv("train.csv", reviews(["pos", "neg"], per_class=6))
    write_csv("test.csv", [("a test review we must never pretrain on", "pos"), ("another test review", "neg")])
    write("corpus/a.txt", "first document\nsecond document\n\n")
    write("corpus/b.txt", "third document\nA TEST review we must never   pretrain on\nfourth document\n")
    params = files_params(train="train.csv", test="test.csv", corpus="corpus/*.txt", add_train_to_corpus=False,
                          tokenizer={"vocab_size": 21})  # what sentencepiece can make of four short lines
    prepared = prepare(load_source(params.data), params.data)
    assert prepared.corpus_valid == ["first document"]  # line 0 always goes to the validation part
    assert prepared.corpus_train == ["second document", "third document", "fourth document"]
    corpus = [Path(e["path"]).as_posix() for e in entries_of(check_inputs(params)) if e["key"] == "data.corpus"]
    assert corpus == ["corpus/a.txt", "corpus/b.txt"]


def test_the_manifest_hashes_every_file_is_deterministic_and_follows_content_changes():
    write_csv("train.csv", reviews(["pos", "neg"], per_class=6))
    write_csv("valid.csv", [("valid one", "pos"), ("valid two", "neg")])
    write("corpus.txt", "some document\nanother document\n")
    params = files_params(train="train.csv", valid="valid.csv", corpus="corpus.txt", tokenizer={"vocab_size": 34})
    first = entries_of(check_inputs(params))
    assert [(e["key"], e["path"]) for e in first] == [
        ("data.train", "train.csv"), ("data.valid", "valid.csv"), ("data.corpus", "corpus.txt")]
    for entry in first:
        content = Path(entry["path"]).read_bytes()
        assert (entry["sha256"], entry["bytes"]) == (hashlib.sha256(content).hexdigest(), len(content))
    assert check_inputs(params) == check_inputs(params)  # deterministic
    assert entries_of(check_inputs(params)) == first
    write("corpus.txt", "some document\nan edited document\n")
    changed = entries_of(check_inputs(params))
    assert changed[:2] == first[:2]
    assert changed[2]["sha256"] == hashlib.sha256(Path("corpus.txt").read_bytes()).hexdigest()
    assert changed[2]["sha256"] != first[2]["sha256"]


def test_a_checkpoint_with_another_id_space_is_named_and_one_with_the_dictionarys_is_in_the_manifest():
    write_pieces_data()
    write("dict.txt", dictionary())  # 8 pieces -> 12 ids
    config = ModelConfig(vocab_size=50, d_model=8, n_layers=1, n_heads=2, d_ff=16, dropout=0.1, pad_id=1)
    save_checkpoint("lm.pt", LanguageModel(config), "language_model", config)
    params = files_params(train="train.spm", format="pieces", tokenizer={"vocab_file": "dict.txt"},
                          pretrain={"init_from": "lm.pt", "seeds": [0]},
                          model={"n_layers": 1, "d_model": 8, "n_heads": 2, "d_ff": 16})
    with pytest.raises(CheckpointImportError,
                       match=r"lm\.pt: .*has 50 token ids but the tokenizer gives 12: the id space does not match"):
        check_inputs(params)
    write("dict.txt", dictionary(DICTIONARY_PIECES + [f"▁w{i}" for i in range(38)]))  # 46 + 4 = 50 ids
    entries = entries_of(check_inputs(params))
    assert entries[-1]["key"] == "pretrain.init_from" and entries[-1]["path"] == "lm.pt"
    assert entries[-1]["sha256"] == hashlib.sha256(Path("lm.pt").read_bytes()).hexdigest()


@pytest.mark.parametrize("data, message", [
    ({"train": "train.xml", "format": "xml"}, r"data\.format"),
    ({"train": "train.spm", "format": "pieces"}, r"tokenizer\.vocab_file.*tokenizer\.model_file"),
    ({"train": "train.csv", "tokenizer": {"vocab_file": "dict.txt"}},
     r"tokenizer\.vocab_file only maps pieces to ids.*tokenizer\.model_file"),
])
def test_params_that_cannot_fit_the_data_are_a_config_error_naming_the_keys(data, message):
    with pytest.raises(ConfigError, match=message):
        files_params(**data)


@pytest.mark.parametrize("rows, data, error, message", [
    (reviews(["pos"], per_class=10), {}, SplitError, "single class"),
    (reviews(["pos", "neg"], per_class=6), {"add_train_to_corpus": False}, EmptySplitError,
     "pretraining corpus has 0 usable lines"),  # fails while writing the corpus
])
def test_write_prepared_that_fails_leaves_the_previous_output_byte_identical(tmp_path, rows, data, error, message):
    write_csv("train.csv", reviews(["pos", "neg"], per_class=6))
    params = files_params(train="train.csv")
    out = tmp_path / "data" / "prepared"
    write_prepared(load_source(params.data), params.data, out, "files")
    before = snapshot(out.parent)
    assert set(before) == {"prepared/train.tsv", "prepared/valid.tsv", "prepared/test.tsv", "prepared/meta.json",
                           "prepared_corpus/corpus_train.txt", "prepared_corpus/corpus_valid.txt",
                           "prepared_corpus/meta.json"}
    write_csv("train.csv", rows)
    failing = files_params(train="train.csv", **data)
    with pytest.raises(error, match=message):
        write_prepared(load_source(failing.data), failing.data, out, "files")
    assert snapshot(out.parent) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["prepared", "prepared_corpus"]  # no temporary folder left


def run_validate_stage(workdir: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LMTRANSFER_DEBUG", "DVC_ROOT")}
    env["PYTHONPATH"] = str(REPO / "src")
    return subprocess.run([sys.executable, "stages/validate.py"], check=False, cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=120)


def written_manifest_entries(workdir: Path) -> list[dict]:
    """What the stage wrote under paths.INPUTS, one manifest per reading stage."""
    manifests = sorted((workdir / INPUTS).glob("*.json"))
    return [entry for path in manifests for entry in json.loads(path.read_text(encoding="utf-8"))["inputs"]]


def refused(workdir: Path, before: dict[str, bytes], *words: str) -> str:
    """The validate stage run again: it stops in one line holding `words`, every output of `before` unchanged."""
    broken = run_validate_stage(workdir)
    assert broken.returncode == 1 and broken.stderr.startswith("validate: error:") and "Traceback" not in broken.stderr
    assert all(word in broken.stderr for word in words), broken.stderr
    assert snapshot(workdir / "data") == before  # the first run's manifest, byte for byte
    return broken.stderr


@pytest.mark.slow
def test_the_validate_stage_writes_the_manifest_and_a_broken_input_or_tracking_store_leaves_every_output(tmp_path):
    """validate runs first: what it refuses stops `dvc repro` before DVC removes a later stage's outputs."""
    from mlflow import MlflowClient

    (tmp_path / "stages").symlink_to(REPO / "stages", target_is_directory=True)
    write_csv("train.csv", reviews(["pos", "neg"], per_class=6))
    write("params.yaml", json.dumps(shipped_raw({"data": {"source": "files", "train": "train.csv"},  # JSON is YAML
                                                 "tokenizer": {"vocab_size": 30}})))  # what sentencepiece can make
    good = run_validate_stage(tmp_path)
    assert good.returncode == 0, good.stderr
    assert written_manifest_entries(tmp_path) == [{
        "key": "data.train", "path": "train.csv", "bytes": Path("train.csv").stat().st_size,
        "sha256": hashlib.sha256(Path("train.csv").read_bytes()).hexdigest()}]
    assert "validate: inputs ok (data.train=train.csv)" in good.stdout
    before, store, kept = snapshot(tmp_path / "data"), tmp_path / "mlflow.db", tmp_path / "kept.db"
    assert store.is_file()  # validate built the store the later stages log to
    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    client.create_run(client.create_experiment("lmtransfer"))  # a store with a run is never set aside
    store.rename(kept)
    store.mkdir()  # a directory where the store was
    refused(tmp_path, before, "mlflow.db")
    store.rmdir()
    damaged = bytearray(kept.read_bytes())
    damaged[4096:len(damaged) - 4096] = os.urandom(len(damaged) - 8192)
    store.write_bytes(bytes(damaged))
    refused(tmp_path, before, "mlflow.db")
    kept.replace(store)
    write_csv("train.csv", reviews(["pos"], per_class=10))
    refused(tmp_path, before, "train.csv", "single class")
    write("params.yaml", json.dumps(shipped_raw({"data": {"source": "files", "train": "gone.csv"}})))
    assert refused(tmp_path, before).strip() == "validate: error: gone.csv: file not found (set by data.train)"


def test_a_utf16_csv_is_read_when_data_encoding_says_so_and_parquet_bytes_are_decoded_not_stringified():
    write("train.csv", R6, encoding="utf-16")
    assert len(load_source(files_params(train="train.csv", encoding="utf-16").data).splits["train"]) == 12
    table = pd.DataFrame({"text": [f"quite ending {i}".encode() for i in range(10)], "label": [0, 1] * 5})
    table.to_parquet("train.parquet")
    texts = load_source(files_params(train="train.parquet").data).splits["train"]["text"]
    assert texts[0] == "quite ending 0" and not any(t.startswith("b'") for t in texts)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_an_unavailable_device_stops_validate_in_one_line_before_any_data_is_read():
    from lmtransfer.core.errors import DeviceError

    raw = {"data": {"source": "files", "train": "missing.csv"}, "train": {"device": "cuda"}}
    with pytest.raises(DeviceError, match=r"train\.device='cuda' but no CUDA device is available"):
        check_inputs(parse_classification_params(shipped_raw(raw)))


def test_a_seq_len_longer_than_the_task_texts_stops_validate_when_adaptation_reads_them():
    write_csv("train.csv", reviews(["pos", "neg"], 10))
    write_csv("valid.csv", [("good", "pos"), ("bad", "neg")])
    write("corpus.txt", "".join(f"a long corpus line that fills many windows, number {i}\n" for i in range(200)))
    adapting = files_params(train="train.csv", valid="valid.csv", corpus=["corpus.txt"],
                            pretrain={"seq_len": 32, "adapt_epochs": 1}, tokenizer={"vocab_size": 60})
    with pytest.raises(ConfigError, match=r"^the labeled valid texts \(pretrain\.adapt_epochs\) has 2 lines of 7 "
                                          r"characters in all, at most 25 tokens: fewer than pretrain\.seq_len "
                                          r"\+ 1 = 33"):
        check_inputs(adapting)
    check_inputs(files_params(train="train.csv", valid="valid.csv", corpus=["corpus.txt"],
                              pretrain={"seq_len": 32, "adapt_epochs": 0}, tokenizer={"vocab_size": 60}))


def test_one_enormous_corpus_line_is_cut_into_documents_so_the_hold_out_stays_representative():
    from lmtransfer.classification.data.prepare import MAX_DOCUMENT_CHARS, split_long_line

    words = [f"word{i % 997}" for i in range(200_000)]  # about 1.6 million characters on one line
    write_csv("train.csv", reviews(["pos", "neg"], 10))
    write("corpus.txt", " ".join(words) + "\n" + "".join(f"short line {i}\n" for i in range(300)))
    data = files_params(train="train.csv", corpus=["corpus.txt"]).data
    prepared = prepare(load_source(data), data)
    valid_chars, train_chars = sum(map(len, prepared.corpus_valid)), sum(map(len, prepared.corpus_train))
    assert 0.005 < valid_chars / (valid_chars + train_chars) < 0.05  # about corpus_valid_fraction (0.02), not ~100%
    assert max(map(len, prepared.corpus_valid + prepared.corpus_train)) <= MAX_DOCUMENT_CHARS
    kept = [w for d in split_long_line(" ".join(words)) for w in d.split()]
    assert kept == words  # cut at spaces: no word lost or split
    assert split_long_line("x" * 25) == ["x" * 25]
    assert split_long_line("ab cd ef", limit=5) == ["ab cd", "ef"]
    assert split_long_line("abcdefgh ij", limit=3) == ["abc", "def", "gh", "ij"]  # no space: cut at the limit


@pytest.mark.parametrize("files, data, classes", [
    ({"train.csv": relabeled(["1", "0"], {2: "1.0", 5: "0.0"}),  # as spreadsheets export them
      "test.csv": csv_text([(f"another film {i}", ["1.00", "0", "01"][i % 3]) for i in range(6)])},
     {"test": "test.csv"}, {"train": ["0", "1"], "test": ["0", "1"]}),
    ({"train.jsonl": jsonl([1, 1.0, 0, 0.0] * 2)}, {"train": "train.jsonl"}, {"train": ["0", "1"]}),
    ({"train.jsonl": jsonl([1, True, 0, False] * 4)}, {"train": "train.jsonl"}, {"train": ["0", "1"]}),
    ({"train.csv": csv_text([(f"film {i}", ["True", "true", "false", "FALSE"][i % 4]) for i in range(12)])}, {},
     {"train": ["false", "true"]}),
    ({"train.jsonl": jsonl([i % 2 == 0 for i in range(8)])}, {"train": "train.jsonl"}, {"train": ["false", "true"]}),
    ({"train.csv": relabeled(["pos", "neg"], {6: "Pos"})}, {"label_case": "fold"}, {"train": ["neg", "pos"]}),
    ({"train.csv": relabeled(["caf\u00e9", "bar"], {4: "cafe\u0301"})}, {"label_case": "fold"},
     {"train": ["bar", "caf\u00e9"]}),
])
def test_spellings_of_one_label_are_one_class_numbers_as_numbers_booleans_as_booleans(files, data, classes):
    for name, content in files.items():
        write(name, content)
    raw = load_source(files_params(**{"train": "train.csv", **data}).data)
    assert {name: sorted(set(table["label"])) for name, table in raw.splits.items()} == classes


def test_a_fifo_a_symlink_loop_and_a_broken_link_are_not_called_missing_files():
    os.mkfifo("corpus.fifo")
    write_csv("train.csv", reviews(["pos", "neg"], 10))
    with pytest.raises(InputFileError, match=r"corpus\.fifo: is not a regular file \(a pipe, socket or device\)"):
        check_inputs(files_params(train="train.csv", corpus=["corpus.fifo"]))
    os.symlink("loop_b.csv", "loop_a.csv")
    os.symlink("loop_a.csv", "loop_b.csv")
    with pytest.raises(InputFileError, match=r"loop_a\.csv: is a symbolic link to loop_b\.csv, which leads back to "
                                             r"itself \(a loop of links\) \(set by data\.train\)"):
        check_inputs(files_params(train="loop_a.csv"))
    os.symlink("gone.csv", "broken.csv")
    with pytest.raises(InputFileError, match=r"broken\.csv: is a symbolic link to gone\.csv, which does not exist"):
        check_inputs(files_params(train="broken.csv"))


def test_labels_with_spaces_around_them_are_folded_with_a_line_like_every_other_fold(capsys):
    write("train.csv", relabeled(["pos", "neg"], {0: " pos", 3: "neg "}))
    assert set(load_source(files_params(train="train.csv").data).splits["train"]["label"]) == {"neg", "pos"}
    printed = capsys.readouterr().out
    assert "data: label ' pos' is the class 'pos'" in printed and "data: label 'neg ' is the class 'neg'" in printed


def test_a_design_larger_than_the_default_is_priced_before_it_starts():
    default = parse_classification_params(shipped_raw())
    assert design_cost(default, default) is None
    many = parse_classification_params(shipped_raw({"pretrain": {"seeds": list(range(40))}}))
    cost = design_cost(many, default)
    runs, seeds = len(default.pretrain.seeds), len(default.finetune.seeds)
    assert cost.startswith(f"pretrain.seeds x finetune.seeds = 40 x {seeds}: 40 pretraining runs and {80 * seeds} "
                           "fine-tunes")
    assert f"{40 / runs:.1f}x" in cost
