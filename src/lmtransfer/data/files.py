"""The user's own files: labeled tables (CSV, TSV, JSONL, Parquet, pieces + labels) and corpora (streamed).
Every problem is reported once, naming the file, the line (or row) and the params.yaml key to change."""

from __future__ import annotations

import codecs
import csv
import glob
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from lmtransfer.core.errors import DataSourceError
from lmtransfer.data.input_files import resolve_input

FORMAT_BY_SUFFIX = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
                    ".parquet": "parquet", ".pq": "parquet"}
LABEL_SUFFIX = ".label"
COMPRESSED = {b"\x1f\x8b": "gzip", b"PK\x03\x04": "zip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz",
              b"\x28\xb5\x2f\xfd": "zstd"}
MISSING_LABELS = {"nan", "na", "n/a", "null", "none"}  # how a missing value is spelled in exported tables


def expand_corpus(patterns: list[str]) -> list[Path]:
    """Files named by `data.corpus`: plain paths or globs (`**` recurses), in a stable order."""
    files: list[Path] = []
    for pattern in patterns:
        if not glob.has_magic(pattern):
            files.append(resolve_input(pattern, "data.corpus"))
            continue
        root = os.environ.get("DVC_ROOT", "")
        matches = sorted(glob.glob(pattern, recursive=True)) or (
            sorted(glob.glob(os.path.join(root, pattern), recursive=True)) if root else []
        )
        matches = [m for m in matches if os.path.isfile(m)]
        if not matches:
            raise DataSourceError(f"{pattern}: no file matches this pattern (set by data.corpus)")
        files += [resolve_input(m, "data.corpus") for m in matches]
    return files


def iter_lines(path: Path, encoding: str, key: str) -> Iterator[tuple[int, str]]:
    """(line number, text without newline, BOM or trailing CR), decoded incrementally so an error names its line
    (any encoding, UTF-16's two-byte newline included)."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    pending, number = "", 0

    def decode(raw: bytes, final: bool = False) -> str:
        try:
            return decoder.decode(raw, final=final)
        except UnicodeDecodeError as exc:
            line = number + (pending + exc.object[: exc.start].decode(encoding, "replace")).count("\n") + 1
            why, hint = "the file ends in the middle of a character" if final else exc.reason, ""
        except UnicodeError as exc:  # UTF-16/32 without a byte-order mark: the decoder cannot tell the byte order
            line, why = number + 1, exc
            hint = f"; name the byte order: {encoding}-le or {encoding}-be" if "BOM" in str(exc) else ""
        raise DataSourceError(f"{path}, line {line}: not valid {encoding} text ({why}){hint}; convert the file or "
                              f"set data.encoding (read because of {key})")

    def clean(line: str, number: int) -> str:
        return (line.removeprefix("\ufeff") if number == 1 else line).removesuffix("\r")

    with open(path, "rb") as handle:
        _refuse_non_text(path, handle.read(4096), encoding, key)
        handle.seek(0)
        for raw in iter(lambda: handle.read(1 << 16), b""):
            pending += decode(raw)
            *complete, pending = pending.split("\n")
            for line in complete:
                number += 1
                yield number, clean(line, number)
        pending += decode(b"", final=True)
    if pending:
        yield number + 1, clean(pending, number + 1)


def wide_text_encoding(head: bytes) -> str | None:
    """'utf-16-le' or 'utf-16-be' when the bytes look UTF-16 (a NUL beside nearly every ASCII character)."""
    pairs = len(head) // 2
    if pairs < 4:
        return None
    for name, zeros in (("utf-16-le", head[1 : 2 * pairs : 2]), ("utf-16-be", head[0 : 2 * pairs : 2])):
        if zeros.count(0) >= 0.9 * pairs:
            return name
    return None


def _refuse_non_text(path: Path, head: bytes, encoding: str, key: str) -> None:
    """Compressed bytes, or UTF-16 read as a one-byte encoding, would fail later as garbage rows: say what they are."""
    for magic, kind in COMPRESSED.items():
        if head.startswith(magic):
            raise DataSourceError(f"{path}: the file looks {kind}-compressed, not text (set by {key}); decompress "
                                  "it first and name the decompressed file")
    if codecs.lookup(encoding).name.startswith(("utf-16", "utf-32")):
        return
    wide = wide_text_encoding(head.removeprefix(codecs.BOM_UTF16_LE).removeprefix(codecs.BOM_UTF16_BE))
    if wide:
        raise DataSourceError(f"{path}: the text is {wide.upper()} (a NUL byte beside every character), not "
                              f"data.encoding {encoding}: set data.encoding: {wide} (read because of {key})")


def refuse_nul(text: str, place: str, encoding: str, subject: str = "", after: str = "") -> None:
    if "\x00" in text:
        raise DataSourceError(f"{place}: {subject}holds a NUL byte: binary data, or a file in another encoding "
                              f"than data.encoding ({encoding})?{after}")


@dataclass
class CorpusFiles:
    """A re-iterable stream of documents (one per non-blank line) from several files."""

    paths: list[Path]
    encoding: str = "utf-8"

    def __iter__(self) -> Iterator[str]:
        for path in self.paths:
            for number, line in iter_lines(path, self.encoding, "data.corpus"):
                refuse_nul(line, f"{path}, line {number}", self.encoding, after=" (set by data.corpus)")
                if line.strip():
                    yield line


def split_files(given: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """(split, path) for each split file given, resolved; two keys naming one file are refused."""
    seen: dict[str, Path] = {}
    for name, path in given.items():
        if not path:
            continue
        resolved = resolve_input(path, f"data.{name}")
        for other, other_path in seen.items():
            if os.path.samefile(resolved, other_path):
                raise DataSourceError(
                    f"{path}: data.{name} and data.{other} name the same file; every {name} text would also be a "
                    f"{other} text. Give data.{name} its own file, or leave it '' to carve it from data.train"
                )
        seen[name] = resolved
        yield name, resolved


class Column(NamedTuple):
    """A column to read: its name in the file and the params key that sets it (for the messages)."""

    name: str
    key: str
    is_label: bool = False  # a class label (a number or a name); otherwise a text


Columns = dict[str, Column]  # output column -> the file's column it is read from


def table_format(path: Path, fmt: str, key: str, also: tuple[str, ...] = ()) -> str:
    """`fmt`, or for `auto` the extension's; `also`: the caller's own formats, offered in the message."""
    if fmt != "auto":
        return fmt
    if path.suffix.lower() not in FORMAT_BY_SUFFIX:
        known = ", ".join(sorted(set(FORMAT_BY_SUFFIX.values())) + list(also))
        raise DataSourceError(f"{path}: cannot tell the format from the extension {path.suffix!r} (set by {key}); "
                              f"set data.format to one of {known}")
    return FORMAT_BY_SUFFIX[path.suffix.lower()]


def label_file_for(path: Path) -> Path:
    """The `.label` file parallel to a pieces file: train.spm -> train.label (or train.spm.label)."""
    candidates = [path.with_suffix(LABEL_SUFFIX), path.with_name(path.name.split(".")[0] + LABEL_SUFFIX),
                  path.with_name(path.name + LABEL_SUFFIX)]
    for candidate in candidates:
        if candidate.is_file() and candidate != path:
            return candidate
    tried = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise DataSourceError(f"{path}: no parallel label file found (tried {tried}); one label per line is needed")


def read_table(path: Path, fmt: str, columns: Columns, encoding: str, key: str) -> pd.DataFrame:
    """`columns` of a CSV, TSV, JSONL or Parquet file as strings, plus `where` (line or row, for messages)."""
    if fmt == "parquet":
        try:
            table = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
            raise DataSourceError(f"{path}: not a readable Parquet file ({exc}); check data.format") from None
        return _select_columns(table, path, columns, encoding, [f"row {i + 1}" for i in range(len(table))])
    reader = _read_jsonl if fmt == "jsonl" else _read_delimited
    return reader(path, fmt, columns, encoding, key)


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def refuse_blank(table: pd.DataFrame, path: Path, key: str, rows: str) -> None:
    """A file without `rows`, or an empty value in any column, stops here."""
    if table.empty:
        raise DataSourceError(f"{path}: no {rows} (set by {key})")
    for column in table.columns.drop("where"):
        blank = table[column].str.strip() == ""
        if blank.any():
            raise DataSourceError(f"{path}, {table.loc[blank.idxmax(), 'where']}: empty {column} "
                                  f"({_rows(int(blank.sum()))} like this in the file; set by {key})")


def refuse_missing_labels(table: pd.DataFrame, path: Path, label_column: str) -> None:
    """A label spelled like a missing value would silently become a class of its own."""
    missing = [i for i, label in enumerate(table["label"]) if label.casefold() in MISSING_LABELS]
    if missing:
        raise DataSourceError(
            f"{path}, {table['where'][missing[0]]}: missing label {table['label'][missing[0]]!r} "
            f"({_rows(len(missing))} like this in the file; data.label_column {label_column!r}): it would become a "
            "class of its own; give every row a label or remove the unlabeled rows"
        )


def _select_columns(table: pd.DataFrame, path: Path, columns: Columns, encoding: str,
                    where: list[str]) -> pd.DataFrame:
    """`columns` as clean strings, plus `where`; a value that would become a wrong text or class stops here."""
    for column in columns.values():
        if column.name not in table.columns:
            found = ", ".join(repr(str(name)) for name in table.columns[:10])
            raise DataSourceError(f"{path}: no column {column.name!r} ({column.key}); the columns are: {found}")
    values: dict[str, list[str]] = {name: [] for name in columns}
    for place, *row in zip(where, *(table[column.name] for column in columns.values())):
        for (name, column), value in zip(columns.items(), row):
            at = f"{path}, {place}"
            values[name].append(_as_label(value, at, column) if column.is_label else _as_text(value, at, column, encoding))
    for name, column in columns.items():
        if not column.is_label and values[name] and all(as_number(text) is not None for text in values[name]):
            raise DataSourceError(f"{path}, {where[0]}: every text of {column.key} {column.name!r} is a number "
                                  f"({values[name][0]!r} here): {_not_texts(column)}")
    return pd.DataFrame({**values, "where": where})


def _not_texts(column: Column) -> str:
    return f"is {column.key} the column of texts? (a number column is a label or an id)"


def as_number(text: str) -> float | None:
    """The number a text spells (`1`, `1.0`, `1e3`, `inf`), or None."""
    try:
        return float(text)
    except ValueError:
        return None


def _is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and pd.isna(value))


def _as_text(value, place: str, column: Column, encoding: str) -> str:
    """Bytes are decoded (data.encoding); a number, list or object is refused, never stringified."""
    if _is_missing(value):
        return ""
    what = f"{place}: the text ({column.key} {column.name!r}) is a"
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode(encoding)
        except UnicodeDecodeError as exc:
            raise DataSourceError(f"{place}: the text is bytes that are not {encoding} ({exc.reason}); "
                                  "set data.encoding") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        raise DataSourceError(f"{what} number ({value!r}), not a string: {_not_texts(column)}")
    elif not isinstance(value, str):
        raise DataSourceError(f"{what} {type(value).__name__}, not a string; join it into one string per row")
    refuse_nul(value, place, encoding, subject="the text ")
    return value


def _as_label(value, place: str, column: Column) -> str:
    """A label as the text a CSV would hold (1.0 as `1`, true as `true`), for every format alike."""
    if _is_missing(value):
        return ""
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    elif not isinstance(value, (str, int, float)):
        raise DataSourceError(f"{place}: the label ({column.key} {column.name!r}) is a {type(value).__name__}, "
                              "not a single value")
    return str(value)


def _read_delimited(path: Path, fmt: str, columns: Columns, encoding: str, key: str) -> pd.DataFrame:
    """CSV (RFC 4180 quoting) or TSV (no quoting), with true line numbers."""
    for _ in iter_lines(path, encoding, key):  # the csv module reports a bad byte without its line: find it first
        pass
    csv.field_size_limit(1 << 30)  # long documents are fine; the default stops at 128 KB
    quoting = csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL
    with open(path, encoding=encoding, newline="") as handle:
        reader = csv.reader(handle, delimiter="\t" if fmt == "tsv" else ",", quoting=quoting, strict=True)
        try:
            header = next(reader, None)
            if not header:
                raise DataSourceError(f"{path}: the file is empty (set by {key})")
            header[0] = header[0].removeprefix("\ufeff")
            repeated = sorted({name for name in header if header.count(name) > 1})
            if repeated:
                numbers = ", ".join(str(i + 1) for i, name in enumerate(header) if name == repeated[0])
                raise DataSourceError(f"{path}, line 1: the header names column {repeated[0]!r} more than once "
                                      f"(columns {numbers}); give every column its own name")
            rows, where = [], []
            first_line = reader.line_num + 1
            for record in reader:
                if any(field.strip() for field in record):
                    if len(record) != len(header):
                        raise DataSourceError(f"{path}, line {first_line}: {len(record)} fields but the header has "
                                              f"{len(header)} (is it really {fmt.upper()}? check data.format)")
                    rows.append(record)
                    where.append(f"line {first_line}")
                first_line = reader.line_num + 1
        except csv.Error as exc:
            # A stray quote opens a field that swallows the following lines; the record began at first_line.
            reached = f" (reading on to line {reader.line_num})" if reader.line_num > first_line else ""
            hint = "; a stray '\"' there?" if '"' in str(exc) or "end of data" in str(exc) else ""
            raise DataSourceError(f"{path}, line {first_line}: not valid {fmt.upper()}{reached}: {exc}{hint}") from None
    return _select_columns(pd.DataFrame(rows, columns=header, dtype=str), path, columns, encoding, where)


def _read_jsonl(path: Path, fmt: str, columns: Columns, encoding: str, key: str) -> pd.DataFrame:
    rows, where = [], []
    for number, line in iter_lines(path, encoding, key):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataSourceError(f"{path}, line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise DataSourceError(f"{path}, line {number}: expected a JSON object, got {type(row).__name__}")
        for column in columns.values():
            if column.name not in row:
                raise DataSourceError(f"{path}, line {number}: no field {column.name!r} ({column.key}); the fields "
                                      f"are: {', '.join(list(row)[:10])}")
        rows.append(row)
        where.append(f"line {number}")
    table = pd.DataFrame(rows, columns=[column.name for column in columns.values()])
    return _select_columns(table, path, columns, encoding, where)


def read_pieces(path: Path, encoding: str, key: str) -> pd.DataFrame:
    """Pre-tokenized reviews (space-separated pieces per line) plus a parallel `.label` file."""
    labels_path = label_file_for(path)
    texts = [line for _, line in iter_lines(path, encoding, key)]
    labels = [line for _, line in iter_lines(labels_path, encoding, key)]
    if texts and texts[-1] == "" and len(texts) == len(labels) + 1:
        texts.pop()  # a trailing blank line is not a review
    if len(texts) != len(labels):
        raise DataSourceError(f"{labels_path}: {len(labels)} labels but {path} has {len(texts)} lines; "
                              "the label file needs exactly one label per line of the text file")
    return pd.DataFrame({"text": texts, "label": labels, "where": [f"line {i + 1}" for i in range(len(texts))]})
