"""Reading the files params.yaml names: encodings told apart before a wrong one becomes a wrong row."""

import codecs

import pytest

from lmtransfer.core.errors import DataSourceError
from lmtransfer.data.files import Column, iter_lines, read_table, wide_text_encoding

TEXT = "text,label\nhello there,pos\nbad movie,neg\n"


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_recognised_by_its_nul_bytes_and_one_byte_text_is_not(encoding):
    assert wide_text_encoding(TEXT.encode(encoding)) == encoding
    assert wide_text_encoding((codecs.BOM_UTF16_LE if encoding.endswith("le") else b"") + TEXT.encode(encoding)
                              [: 40]) in (encoding, None)
    for text in (TEXT, "文本,标签\n很好,pos\n", "a\x00b,c\nd,e\n"):  # a stray NUL is not UTF-16 either
        assert wide_text_encoding(text.encode("utf-8")) is None, text


def test_utf16_read_as_utf8_stops_before_any_row_naming_the_encoding_to_set(tmp_path):
    path = tmp_path / "train.csv"
    path.write_bytes(TEXT.encode("utf-16-le"))
    with pytest.raises(DataSourceError, match="the text is UTF-16-LE .*: set data.encoding: utf-16-le \\(read because "
                                              "of data.train\\)"):
        next(iter_lines(path, "utf-8", "data.train"))
    assert [line for _, line in iter_lines(path, "utf-16-le", "data.train")] == TEXT.splitlines()


@pytest.mark.parametrize("content", [b"\n", b"\r\n"])
def test_a_table_of_one_blank_line_is_refused_as_empty_naming_the_key(tmp_path, content):
    path = tmp_path / "train.csv"
    path.write_bytes(content)
    with pytest.raises(DataSourceError, match=r"train\.csv: the file is empty \(set by data\.train\)"):
        read_table(path, "csv", {"text": Column("text", "data.text_column")}, "utf-8", "data.train")
