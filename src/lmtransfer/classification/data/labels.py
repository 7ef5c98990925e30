"""Labels spelled more than one way for one class: made one class, or refused in one line, never two classes.

Spreadsheets and pandas write `1` as `1.0`; a hand-edited file mixes `pos` and `Pos`. A label column whose
values are all numbers is compared as numbers (`1`, `1.0`, `01` are the class `1`), and one of booleans as
booleans (`True`, `true`, `TRUE` are `true`; beside numbers, `true` is 1 and `false` 0). Names that differ
only in case or Unicode form stop `validate`, naming both spellings and where each first occurs, unless
`data.label_case: fold` asks to make them one class. The same rule for every format, and across the
train, valid and test files together.
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from typing import Literal

import pandas as pd

from lmtransfer.data.files import as_number
from lmtransfer.core.errors import DataSourceError

BOOLEANS = {"true": "1", "false": "0"}
LabelCase = Literal["strict", "fold"]


def canonical_labels(splits: dict[str, pd.DataFrame], origins: dict[str, str],
                     label_case: LabelCase = "strict") -> tuple[dict[str, pd.DataFrame], list[str]]:
    """The splits with one spelling per class, and a line per folded spelling (for the log). Spaces around a label
    are dropped first (`' pos'` is the class `'pos'`), and said like every other fold."""
    padded = [label for label in dict.fromkeys(pd.concat([t["label"] for t in splits.values()])) if label != label.strip()]
    if padded:
        splits = {name: table.assign(label=table["label"].str.strip()) for name, table in splits.items()}
    labels = pd.concat([table["label"] for table in splits.values()], ignore_index=True)
    spellings = list(dict.fromkeys(labels))
    if all(label.casefold() in BOOLEANS for label in spellings):
        mapping = {label: label.casefold() for label in spellings}
    elif all(label.casefold() in BOOLEANS or _number(label) is not None for label in spellings):
        mapping = {label: _number(BOOLEANS.get(label.casefold(), label)) for label in spellings}
    else:
        mapping = _fold_names(splits, origins, labels, label_case)
    folded = [f"label {label!r} is the class {mapping[label.strip()]!r}" for label in padded]
    folded += [f"label {label!r} is the class {name!r}" for label, name in mapping.items() if label != name]
    if not folded:
        return splits, []
    return {name: table.assign(label=table["label"].map(mapping)) for name, table in splits.items()}, folded


def _number(label: str) -> str | None:
    """The class name of a numeric label (`1.0` -> `1`, `0.50` -> `0.5`), or None when it is not a number."""
    value = as_number(label)
    if value is None or not math.isfinite(value):
        return None
    return str(int(value)) if value.is_integer() else repr(value)


def _fold_names(splits: dict[str, pd.DataFrame], origins: dict[str, str], labels: pd.Series,
                label_case: LabelCase) -> dict[str, str]:
    """Names that differ only in case or Unicode form: the most frequent spelling (`fold`), or an error."""
    counts = Counter(labels)
    groups: dict[str, list[str]] = {}
    for label in counts:
        groups.setdefault(unicodedata.normalize("NFKC", label).casefold(), []).append(label)
    mapping = {label: label for label in counts}
    for group in groups.values():
        if len(group) == 1:
            continue
        if label_case != "fold":
            first, second = group[:2]
            raise DataSourceError(
                f"labels {first!r} ({_first_place(first, splits, origins)}) and {second!r} "
                f"({_first_place(second, splits, origins)}) differ only in case or Unicode form, so they would be "
                "two classes; fix the file, or set data.label_case: fold to make them one class"
            )
        name = max(group, key=lambda label: counts[label])  # ties: the first seen
        mapping.update({label: name for label in group})
    return mapping


def _first_place(label: str, splits: dict[str, pd.DataFrame], origins: dict[str, str]) -> str:
    for name, table in splits.items():
        rows = table.index[table["label"] == label]
        if len(rows):
            return f"{origins.get(name, name)}, {table.loc[rows[0], 'where']}"
    raise ValueError(label)
