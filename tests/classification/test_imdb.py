"""The IMDb release, miniature: from a loopback server, an archive or a folder; checked before kept; read in order."""

from __future__ import annotations

import dataclasses
import functools
import tarfile
from pathlib import Path

import pytest

from lmtransfer.classification.data.imdb_release import ACL_IMDB_V1, ReviewLines, imdb_reviews, measure_folder
from lmtransfer.classification.data.prepare import prepare
from lmtransfer.classification.data.sources import load_source
from lmtransfer.cli.main import main
from lmtransfer.core.errors import DataSourceError
from lmtransfer.core.io import sha256_of

from loopback import serving
from shipped import shipped

FOLDERS = {"train/pos": 6, "train/neg": 6, "train/unsup": 10, "test/pos": 5, "test/neg": 5}


def _review(folder: str, number: int) -> str:
    return f"A {folder.replace('/', ' ')} review number {number}.<br /><br />Its second line, in\ttwo  parts."


def write_release(root: Path) -> Path:
    """A miniature aclImdb/ folder: `<id>_<rating>.txt` files as the release names them, plus files not read."""
    top = root / "aclImdb"
    for folder, count in FOLDERS.items():
        (top / folder).mkdir(parents=True)
        for number in range(count):
            rating = 0 if folder.endswith("unsup") else (8 if folder.endswith("pos") else 2)
            (top / folder / f"{number}_{rating}.txt").write_text(_review(folder, number), encoding="utf-8")
    (top / "README").write_text("not a review\n")
    (top / "train" / "labeledBow.feat").write_text("0 0:1\n")
    return top


def write_archive(top: Path, archive: Path) -> Path:
    """The folder as a gzipped tar, members in an order other than their names' (as a real archive may be)."""
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(top.rglob("*"), key=lambda p: str(p)[::-1]):
            tar.add(path, arcname=str(path.relative_to(top.parent)), recursive=False)
    return archive


@pytest.fixture
def mini(tmp_path):
    """The folder, its archive, and the release pinned to them."""
    top = write_release(tmp_path / "unpacked")
    archive = write_archive(top, tmp_path / "aclImdb_v1.tar.gz")
    return top, archive, dataclasses.replace(
        ACL_IMDB_V1, archive_bytes=archive.stat().st_size, archive_sha256=sha256_of(archive), url="unused",
        folders=tuple(measure_folder(top, folder) for folder in FOLDERS), version="mini")


@pytest.fixture
def served(mini, tmp_path):
    """A loopback HTTP server over the archive, as Stanford's host serves it."""
    with serving(mini[1].parent) as url:
        yield f"{url}/{mini[1].name}"


def _kept_lines(kept: Path, folder: str) -> list[str]:
    return list(ReviewLines([kept / (folder.replace("/", "-") + ".txt")]))


def test_the_archive_is_downloaded_checked_and_kept_one_review_a_line_in_file_name_order(mini, served, tmp_path):
    cache = tmp_path / "cache"
    kept = imdb_reviews("", dataclasses.replace(mini[2], url=served), cache)
    assert (cache / "aclImdb_v1.tar.gz").read_bytes() == mini[1].read_bytes()
    lines = _kept_lines(kept, "train/pos")
    names = sorted(f"{n}_8.txt" for n in range(6))  # 0_8, 1_8, ... : bytewise order of the names
    assert lines == [f"A train pos review number {name.split('_')[0]}. Its second line, in two parts."
                     for name in names]
    assert len(_kept_lines(kept, "train/unsup")) == 10
    # a second call reuses what was kept: no server needed
    assert imdb_reviews("", dataclasses.replace(mini[2], url="http://127.0.0.1:9/nothing-here"), cache) == kept


def test_a_local_archive_and_the_unpacked_folder_give_the_same_reviews_checked_again_before_use(mini, tmp_path):
    top, archive, release = mini
    from_archive = imdb_reviews(str(archive), release, tmp_path / "a")
    from_folder = imdb_reviews(str(top.parent), release, tmp_path / "b")  # the folder above aclImdb/ also does
    for folder in FOLDERS:
        assert _kept_lines(from_archive, folder) == _kept_lines(from_folder, folder)
    with open(from_folder / "train-unsup.txt", "a", encoding="utf-8") as handle:  # kept reviews changed since
        handle.write("an added line\n")
    with pytest.raises(DataSourceError, match="train-unsup.txt: not the reviews that were checked"):
        imdb_reviews(str(top.parent), release, tmp_path / "b")


def _refusal(source: str, release, cache: Path) -> str:
    with pytest.raises(DataSourceError) as error:
        imdb_reviews(source, release, cache)
    message = str(error.value)
    assert "\n" not in message
    assert not (cache / f"imdb-reviews-{release.version}").exists()  # nothing kept
    return message


def test_a_changed_byte_of_the_archive_is_refused_in_one_line_and_nothing_is_kept(mini, tmp_path):
    _, archive, release = mini
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    changed = tmp_path / "changed.tar.gz"
    changed.write_bytes(bytes(data))
    assert "is not the pinned" in _refusal(str(changed), release, tmp_path / "cache")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[:-100])
    assert "cut short" in _refusal(str(cut), release, tmp_path / "cache")


def test_a_download_that_is_not_the_archive_is_refused_and_not_placed(mini, served, tmp_path):
    other = dataclasses.replace(mini[2], archive_sha256="0" * 64, url=served)
    cache = tmp_path / "cache"
    assert "is not the pinned 000000000000" in _refusal("", other, cache)
    assert not (cache / "aclImdb_v1.tar.gz").exists()
    assert "could not download" in _refusal("", dataclasses.replace(mini[2], url=served + ".gone"), cache)


@pytest.mark.parametrize(("damage", "expected"), [
    (lambda top: (top / "train/neg/3_2.txt").unlink(), "train/neg: 5 review files where the pinned release has 6 "
                                                       "(none named 3_*.txt)"),
    (lambda top: (top / "test/pos/1_8.txt").write_text(_review("test/pos", 1)[:-4]), "(a file cut short?)"),
    (lambda top: (top / "train/unsup/7_0.txt").write_text(_review("train/unsup", 7).upper()),
     "train/unsup: the content of a file differs"),
    (lambda top: __import__("shutil").rmtree(top / "test/neg"), "test/neg: folder not found"),
])
def test_a_missing_cut_or_changed_file_of_the_folder_is_named_in_one_line(mini, tmp_path, damage, expected):
    top, _, release = mini
    damage(top)
    assert expected in _refusal(str(top), release, tmp_path / "cache")


def test_the_imdb_command_refuses_an_archive_that_is_not_the_pinned_release_in_one_line(mini, tmp_path, monkeypatch):
    monkeypatch.setenv("LMTRANSFER_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(SystemExit) as stop:
        main(["imdb", "--from", str(mini[1])])
    message = str(stop.value)
    assert message.startswith(f"error: {mini[1]}: ") and "where aclImdb_v1.tar.gz has 84,125,825" in message
    assert "\n" not in message
    assert not (tmp_path / "cache" / "imdb-reviews-v1").exists()


def test_a_relative_local_copy_is_found_under_the_repository_root_from_a_temporary_copy(mini, tmp_path, monkeypatch):
    top, _, release = mini
    (tmp_path / "temporary-copy").mkdir()
    monkeypatch.chdir(tmp_path / "temporary-copy")  # a `dvc exp run --temp` copy: the git-ignored folder is not there
    monkeypatch.setenv("DVC_ROOT", str(top.parent.parent))
    kept = imdb_reviews("unpacked/aclImdb", release, tmp_path / "cache")
    assert len(_kept_lines(kept, "train/unsup")) == 10


@pytest.fixture
def kept_mini(mini, tmp_path, monkeypatch):
    """The miniature release kept in a cache of its own, in place of the pinned release's."""
    top, _, release = mini
    monkeypatch.setenv("LMTRANSFER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("lmtransfer.classification.data.sources.ACL_IMDB_V1", release)
    monkeypatch.setattr("lmtransfer.classification.data.sources.imdb_reviews",
                        functools.partial(imdb_reviews, release=release))
    return top


def test_imdb_keeps_its_published_test_split_and_its_reviews_corpus_beside_any_source_has_no_test_review(kept_mini):
    params = shipped("data", source="imdb", imdb_from=str(kept_mini), valid_fraction=0.34)
    prepared = prepare(load_source(params), params)
    assert len(prepared.splits["test"]) == 10  # as published, row for row
    assert len(prepared.splits["valid"]) == 4 and len(prepared.splits["train"]) == 8  # 12 train reviews, stratified
    corpus = prepared.corpus_train + prepared.corpus_valid
    held_out = set(prepared.splits["valid"]["text"]) | set(prepared.splits["test"]["text"])
    assert not held_out & set(corpus)
    assert sum("unsup review" in line for line in corpus) == 10  # the unlabeled reviews, then the train ones
    assert set(prepared.splits["train"]["text"]) <= set(corpus)
    params = shipped("data", source="imdb", corpus=["imdb-reviews"], add_train_to_corpus=False,
                     imdb_from=str(kept_mini))
    raw = load_source(params)
    texts = list(raw.corpus)
    assert len(texts) == 10 + 6 + 6 and not any(" test " in text for text in texts)
    assert texts == list(raw.corpus)  # re-iterable: validate and prepare each stream it


def test_a_corpus_file_beside_a_built_in_source_is_refused_but_a_named_corpus_is_not():
    assert shipped("data", source="movies-en", corpus=["imdb-reviews"]).reads_imdb
    with pytest.raises(ValueError, match=r"data.corpus \('reviews.txt'\) is only read when data.source is 'files'.*"
                                         r"imdb-reviews is read with any source"):
        shipped("data", source="movies-en", corpus=["imdb-reviews", "reviews.txt"])
    with pytest.raises(ValueError, match="data.imdb_from is only read when"):
        shipped("data", source="movies-en", imdb_from="aclImdb_v1.tar.gz")
    with pytest.raises(ValueError, match="corpus_format is 'pieces' but data.corpus names a corpus of plain text"):
        shipped("data", source="files", train="t.tsv", corpus=["imdb-reviews"], corpus_format="pieces")


def test_the_pinned_release_is_the_one_its_checksum_names():
    """The folders' pins add up to the published counts: 25,000 + 25,000 labeled, 50,000 unlabeled."""
    counts = {pin.folder: pin.files for pin in ACL_IMDB_V1.folders}
    assert sum(counts.values()) == 100_000 and counts["train/unsup"] == 50_000
    assert ACL_IMDB_V1.archive_bytes == 84_125_825
