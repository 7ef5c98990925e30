"""A source's raw text into clean, leak-free splits: deduplicate first (one text cannot land in two splits), split
with a seeded stratified shuffle, then stream the pretraining corpus with every valid/test text removed."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from lmtransfer.classification.config import DataParams
from lmtransfer.classification.data.raw import RawData
from lmtransfer.core.errors import EmptySplitError, SplitError
from lmtransfer.core.paths import PREPARED, PREPARED_CORPUS
from lmtransfer.data.normalize import dedup_key, normalize_text, pieces_to_text
from lmtransfer.data.prepared import SPLITS, read_corpus_meta, write_prepared_dir
from lmtransfer.harness.tracking import log_file, log_run, stage_run

MAX_DOCUMENT_CHARS = 20_000  # a longer corpus line becomes several documents (see split_long_line)


def hashed_key(text: str) -> bytes:  # 8 bytes per corpus line: dedup of a huge corpus stays small
    return hashlib.blake2b(dedup_key(text).encode("utf-8"), digest_size=8).digest()


def deduplicate_labeled(table: pd.DataFrame) -> pd.DataFrame:
    """Drop empty texts and repeats; a text seen with two different labels is dropped entirely."""
    table = table[["text", "label"]].assign(text=table["text"].map(normalize_text))
    table = table[table["text"] != ""]
    key = table["text"].map(dedup_key)
    labels_per_text = table.groupby(key)["label"].transform("nunique")
    table = table[labels_per_text == 1]
    return table[~key[table.index].duplicated()].reset_index(drop=True)


def infer_label_names(labels) -> list[str]:
    """Class ids in a predictable order: numeric labels numerically (2 before 10), others alphabetically."""
    unique = set(labels)
    try:
        return sorted(unique, key=lambda label: (int(label), label))
    except ValueError:
        return sorted(unique)


def stratified_split(labels: np.ndarray, valid_fraction: float, test_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """Indices per split; each class is shuffled and cut in the same proportions."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in SPLITS}
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_test = int(round(len(members) * test_fraction))
        n_valid = int(round(len(members) * valid_fraction))
        parts["test"].append(members[:n_test])
        parts["valid"].append(members[n_test : n_test + n_valid])
        parts["train"].append(members[n_test + n_valid :])
    return {name: np.sort(np.concatenate(chunks)) for name, chunks in parts.items()}


@dataclass
class LabeledData:
    splits: dict[str, pd.DataFrame]  # text (str), label (int class id)
    label_names: list[str]
    removed: dict[str, int]  # what deduplication and leak removal dropped from train, for the record
    kept_as_given: dict[str, dict[str, int]] = field(default_factory=dict)  # per given split: rows, repeats, overlaps


def keep_as_given(table: pd.DataFrame) -> pd.DataFrame:
    """A given valid/test split, row for row (a published test set stays comparable): whitespace normalised only."""
    return table[["text", "label"]].assign(text=table["text"].map(normalize_text)).reset_index(drop=True)


def _shared(texts: pd.Series, other: pd.Series) -> pd.Series:
    return texts.map(dedup_key).isin(set(other.map(dedup_key)))


def prepare_labeled(raw: RawData, params: DataParams) -> LabeledData:
    """Given valid/test kept row for row; train deduplicated, stripped of held-out texts; missing splits carved."""
    given = {name: keep_as_given(raw.splits[name]) for name in ("valid", "test") if name in raw.splits}
    train = deduplicate_labeled(raw.splits["train"])
    removed = {"duplicates_train": len(raw.splits["train"]) - len(train)}
    kept_as_given = {name: {"rows": len(table), "repeated_rows": int(table["text"].map(dedup_key).duplicated().sum())}
                     for name, table in given.items()}
    if "valid" in given and "test" in given:
        kept_as_given["valid"]["rows_also_in_test"] = int(_shared(given["valid"]["text"], given["test"]["text"]).sum())
    leaked = pd.Series(False, index=train.index)
    for name, table in given.items():
        in_split = _shared(train["text"], table["text"])
        if len(given) > 1:
            removed[f"train_texts_also_in_{name}"] = int(in_split.sum())
        leaked |= in_split
    removed["train_texts_also_in_valid_or_test"] = int(leaked.sum())
    if len(train) and leaked.all():
        held_out = " and ".join(f"data.{name} ({raw.origins.get(name, name)})" for name in given)
        raise SplitError(
            f"data.train ({raw.origins.get('train', 'train')}): all {len(train)} of its texts are also in "
            f"{held_out}, so none is left to train on (a text is never both trained and tested on); give the "
            "held-out split texts of its own, or leave its key '' to carve it from data.train"
        )
    train = train[~leaked].reset_index(drop=True)

    if params.max_examples and len(train) > params.max_examples:
        keep = np.random.default_rng(params.seed).choice(len(train), params.max_examples, replace=False)
        train = train.iloc[np.sort(keep)].reset_index(drop=True)
    label_names = raw.label_names or infer_label_names(train["label"])
    for name, table in {**given, "train": train}.items():
        unknown = sorted(set(table["label"]) - set(label_names))
        if unknown:
            raise SplitError(
                f"split '{name}' ({raw.origins.get(name, 'data')}) has label(s) {unknown[:5]} that the training "
                f"data does not have; the classes are {label_names}"
            )
    ids = {name: index for index, name in enumerate(label_names)}
    splits = {name: table.assign(label=table["label"].map(ids).astype(np.int64)) for name, table in given.items()}
    splits["train"] = train.assign(label=train["label"].map(ids).astype(np.int64))
    carve = {name: getattr(params, f"{name}_fraction") if name not in given else 0.0 for name in ("valid", "test")}
    if carve["valid"] or carve["test"]:
        indices = stratified_split(splits["train"]["label"].to_numpy(), carve["valid"], carve["test"], params.seed)
        pool = splits["train"]
        splits["train"] = pool.iloc[indices["train"]].reset_index(drop=True)
        for name in ("valid", "test"):
            if carve[name]:
                splits[name] = pool.iloc[indices[name]].reset_index(drop=True)
    splits = {name: splits[name] for name in SPLITS}
    for name, split in splits.items():
        _check_split(name, split, label_names, len(train), raw.origins.get(name))
    _check_every_class_in_every_split(splits, label_names, raw, carve)
    return LabeledData(splits, label_names, removed, kept_as_given)


def describe_removals(meta: dict) -> list[str]:
    """Log lines: what left train, and the repeats and overlaps the given splits hold."""
    removed = meta["removed"]
    per_split = [f"{removed[key]} in {key.removeprefix('train_texts_also_in_')}" for key in removed
                 if key in ("train_texts_also_in_valid", "train_texts_also_in_test")]
    lines = [f"train: {removed['duplicates_train']} repeated or label-conflicting texts removed, "
             f"{removed['train_texts_also_in_valid_or_test']} texts also in valid or test removed"
             + (f" ({', '.join(per_split)})" if per_split else "")]
    for name, facts in meta.get("kept_as_given", {}).items():
        also = f", {facts['rows_also_in_test']} also in test" if "rows_also_in_test" in facts else ""
        lines.append(f"{name}: kept as given, {facts['rows']} rows ({facts['repeated_rows']} repeat an earlier row"
                     f"{also}); none removed")
    return lines


def _check_split(name: str, split: pd.DataFrame, label_names: list[str], n_train: int, origin: str | None) -> None:
    source = f"data.{name} ({origin})" if origin else f"{n_train} labeled examples after deduplication"
    if split.empty:
        raise EmptySplitError(
            f"split '{name}' is empty ({source}); provide more examples, raise data.max_examples "
            "or adjust data.valid_fraction / data.test_fraction"
        )
    classes = split["label"].unique()
    if len(classes) < 2:
        raise SplitError(
            f"split '{name}' has a single class ({label_names[classes[0]]!r}, {len(split)} examples; {source}): "
            "a classifier needs at least two classes to learn or to be measured on"
        )


def _check_every_class_in_every_split(splits: dict[str, pd.DataFrame], label_names: list[str], raw: RawData,
                                     carve: dict[str, float]) -> None:  # carve: the splits cut from train
    """A class missing from a split is a silent wrong result (never learned, never chosen on, or an F1 of 0)."""
    for name, split in splits.items():
        counts = np.bincount(split["label"].to_numpy(), minlength=len(label_names))
        if counts.min() > 0:
            continue
        missing = label_names[int(np.argmin(counts))]
        origin = raw.origins.get("train", "data.train")
        rows = raw.splits["train"]["label"].astype(str) == str(missing)
        where = f", {raw.splits['train'].loc[rows.idxmax(), 'where']}" if "where" in raw.splits["train"] and rows.any() else ""
        sizes = ", ".join(f"{n} {int((s['label'] == label_names.index(missing)).sum())}" for n, s in splits.items())
        raise SplitError(
            f"{origin}{where}: class {missing!r} has too few examples to be in every split ({sizes}): the {name} split "
            f"has none, so it would be {'scored as an F1 of 0' if name == 'test' else 'missing from ' + name}. Add "
            f"examples of it{' to data.' + name if not carve.get(name) else ''}, or remove its rows"
        )


class SeenKeys:
    """The dedup keys met so far, 8 bytes each in one sorted array, looked up and added a batch at a time (a Python
    set costs ~100 bytes a key: 1 GB for a 1 GB corpus's ~8 million lines)."""

    def __init__(self, keys: Iterable[bytes] = ()):
        self.sorted = np.unique(_as_key_array(list(keys)))

    def first_unseen(self, keys: np.ndarray) -> np.ndarray:
        """Mask over `keys`: unseen and the first of its value (what a set asked key by key would accept)."""
        position = np.searchsorted(self.sorted, keys)
        found = np.zeros(len(keys), dtype=bool)
        inside = position < len(self.sorted)
        found[inside] = self.sorted[position[inside]] == keys[inside]
        first = np.zeros(len(keys), dtype=bool)
        first[np.unique(keys, return_index=True)[1]] = True
        return first & ~found

    def add(self, keys: np.ndarray) -> None:
        keys = np.sort(keys)
        self.sorted = np.insert(self.sorted, np.searchsorted(self.sorted, keys), keys)


def _as_key_array(keys: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(keys), dtype=np.uint64).copy() if keys else np.zeros(0, np.uint64)


DEDUP_BATCH_LINES = 65_536  # corpus lines hashed and looked up together


def corpus_documents(raw: RawData, labeled: LabeledData, params: DataParams) -> Iterator[tuple[str, str]]:
    """Stream ('train' | 'valid', document): deduplicated, held-out texts removed. Every round(1/corpus_valid_fraction)
    -th kept line (the first included) goes to validation; with `data.max_corpus_lines`, no line past the last used
    is read."""
    convert_held_out = pieces_to_text if raw.labeled_pieces and not raw.corpus_pieces else (lambda t: t)
    comparable = raw.labeled_pieces == raw.corpus_pieces or raw.labeled_pieces
    seen = SeenKeys()
    if comparable:
        seen = SeenKeys(hashed_key(convert_held_out(t)) for name in ("valid", "test") for t in labeled.splits[name]["text"])
    kept = 0

    def accept(lines: list[str]) -> tuple[list[tuple[str, str]], int]:
        nonlocal kept
        documents, line_of = [], []
        for number, line in enumerate(lines):
            for document in split_long_line(normalize_text(line)):
                if document:
                    documents.append(document)
                    line_of.append(number)
        keys = _as_key_array([hashed_key(document) for document in documents])
        new = np.flatnonzero(seen.first_unseen(keys))
        seen.add(keys[new])
        accepted = []
        for index in new.tolist():
            accepted.append(("valid" if _is_validation_line(kept, params.corpus_valid_fraction) else "train",
                             documents[index]))
            kept += 1
        return accepted, len(np.unique(np.asarray(line_of, dtype=np.int64)[new]))

    corpus_lines, lines = 0, iter(raw.corpus)
    while not params.max_corpus_lines or corpus_lines < params.max_corpus_lines:
        # a line counts once however many documents it gives, so a batch of `budget` lines never passes the cap
        budget = params.max_corpus_lines - corpus_lines if params.max_corpus_lines else DEDUP_BATCH_LINES
        batch = list(itertools.islice(lines, min(DEDUP_BATCH_LINES, budget)))
        if not batch:
            break
        accepted, giving = accept(batch)
        corpus_lines += giving
        yield from accepted
    if params.add_train_to_corpus and comparable:
        texts = [convert_held_out(text) for text in labeled.splits["train"]["text"]]
        for start in range(0, len(texts), DEDUP_BATCH_LINES):
            yield from accept(texts[start : start + DEDUP_BATCH_LINES])[0]


def split_long_line(line: str, limit: int = MAX_DOCUMENT_CHARS) -> list[str]:
    """A longer line cut at spaces (or at `limit` in a run without one) into documents of at most `limit`: the
    validation hold-out takes whole documents, and a book on one line would be all of it, or none."""
    documents = []
    while len(line) > limit:
        cut = line.rfind(" ", 1, limit + 1)
        cut = cut if cut > 0 else limit
        documents.append(line[:cut].strip())
        line = line[cut:].strip()
    return documents + [line]


def _is_validation_line(index: int, fraction: float) -> bool:
    return index == 0 or int((index + 1) * fraction) > int(index * fraction)


@dataclass
class PreparedData:  # everything `prepare` produces, in memory (tests; the stage streams instead)

    splits: dict[str, pd.DataFrame]
    corpus_train: list[str]
    corpus_valid: list[str]
    label_names: list[str]


def prepare(raw: RawData, params: DataParams) -> PreparedData:
    labeled = prepare_labeled(raw, params)
    parts: dict[str, list[str]] = {"train": [], "valid": []}
    for part, document in corpus_documents(raw, labeled, params):
        parts[part].append(document)
    _check_corpus(len(parts["train"]), len(parts["valid"]))
    return PreparedData(labeled.splits, parts["train"], parts["valid"], labeled.label_names)


@dataclass
class CorpusScan:  # lines and characters per corpus part, and the training part when small (a tokenizer trial)

    lines: dict[str, int]
    chars: dict[str, int]
    train_text: list[str] | None


def scan_corpus(raw: RawData, labeled: LabeledData, params: DataParams, keep_chars: int = 0) -> CorpusScan:
    """Stream the corpus as `prepare` will (an empty part stops here); keep its training part up to `keep_chars`."""
    scan = CorpusScan({"train": 0, "valid": 0}, {"train": 0, "valid": 0}, [])
    for part, document in corpus_documents(raw, labeled, params):
        scan.lines[part] += 1
        scan.chars[part] += len(document)
        if part == "train" and scan.train_text is not None:
            scan.train_text.append(document)
            if scan.chars["train"] > keep_chars:
                scan.train_text = None
    _check_corpus(scan.lines["train"], scan.lines["valid"])
    return scan


def _check_corpus(n_train: int, n_valid: int) -> None:
    if n_train == 0 or n_valid == 0:
        raise EmptySplitError(
            f"the pretraining corpus has {n_train + n_valid} usable lines: too few to split off a validation part; "
            "add corpus files (data.corpus), raise data.max_corpus_lines or set data.add_train_to_corpus: true"
        )


def write_prepared(raw: RawData, params: DataParams, out_dir: Path, source: str) -> dict:
    """Split, stream the corpus, write `data/prepared/` and `data/prepared_corpus/`; returns the labeled meta."""
    labeled = prepare_labeled(raw, params)
    description = {"source": source, "labeled_format": "pieces" if raw.labeled_pieces else "text",
                   "corpus_format": "pieces" if raw.corpus_pieces else "text"}
    return write_prepared_dir(out_dir, labeled.splits, labeled.label_names, corpus_documents(raw, labeled, params),
                              description, labeled.removed, kept_as_given=labeled.kept_as_given,
                              check_corpus=lambda lines: _check_corpus(lines["train"], lines["valid"]))


def run_prepare_stage(params: DataParams, logged: dict) -> None:
    """The source read (a bad file stops before any output is replaced), then splits and corpus written."""
    from lmtransfer.classification.data.sources import load_source

    raw = load_source(params)
    with stage_run("prepare", logged):
        meta = write_prepared(raw, params, PREPARED, params.source)
        corpus_lines = read_corpus_meta(PREPARED)["corpus_lines"]
        log_run(metrics={**{f"examples_{k}": v for k, v in meta["examples"].items()},
                         **{f"corpus_lines_{k}": v for k, v in corpus_lines.items()},
                         **{f"removed_{k}": v for k, v in meta["removed"].items()},
                         "n_classes": len(meta["label_names"])})
        log_file(meta, "prepared_meta.json")
    for line in describe_removals(meta):
        print(f"prepare: {line}")
    print(f"prepare: {meta['examples']} labeled examples in {len(meta['label_names'])} classes -> {PREPARED}, "
          f"{corpus_lines} corpus lines -> {PREPARED_CORPUS}")
