"""`evaluate.lab_sentences`: the short sentences every model translates for the results page, read by evaluate and
checked by prepare first (a missing file stopped evaluate only after DVC had removed its outputs)."""

from __future__ import annotations

from lmtransfer.data.input_files import resolve_input
from lmtransfer.translation.data.pairs import read_pairs


def read_lab_sentences(path: str) -> tuple[list[str], list[str]]:
    """The file `evaluate.lab_sentences` names (a TSV with `source` and `target`, relative to translation/) as
    (sources, references); none for ''."""
    if not path:
        return [], []
    pairs = read_pairs(resolve_input(path, "evaluate.lab_sentences"), "evaluate.lab_sentences", "tsv", "source",
                       "target", "utf-8")
    return list(pairs["source"]), list(pairs["target"])
