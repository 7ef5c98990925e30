"""The course's files, downloaded or copied, each checked whole first: a missing, cut or changed one is named."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lmtransfer.core.errors import DataSourceError
from lmtransfer.course.files import PINNED, CourseFile, Manifest, gather, git_blob_id, read_manifest

from loopback import serving

CONTENTS = {
    "cls-books/train.review.spm": "▁Ce ▁livre ▁est ▁super\n▁Tr ès ▁en nu y eux\n",
    "cls-books/train.label": "1\n0\n",
    "dict.txt": "▁Ce 10\n▁livre 9\n",
    "pretrained_model_4layers.pt": "not really a model, but bytes all the same\n",
}


def _manifest() -> Manifest:
    files = []
    for path, text in CONTENTS.items():
        data = text.encode()
        blob = hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
        large = path.endswith(".pt")
        files.append(CourseFile(path, blob, None if large else len(data),
                                None if large else hashlib.sha256(data).hexdigest(), required=not large))
    return Manifest(tuple(files), "0123456789abcdef", "someone/course")


def _repository_copy(folder: Path, skip: tuple[str, ...] = ()) -> Path:
    for path, text in CONTENTS.items():
        if path not in skip:
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def served(tmp_path):
    """A local HTTP server over the files as the raw-file host serves them: (its URL, the folder it serves)."""
    folder = _repository_copy(tmp_path / "served")
    with serving(folder) as url:
        yield url, folder


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_files_are_downloaded_checked_and_placed_under_their_repository_paths(served, tmp_path):
    url, folder = served
    destination = tmp_path / "raw"
    present = gather(destination, _manifest(), url=url)
    assert sorted(present) == sorted(CONTENTS)
    assert _tree(destination) == _tree(folder)  # no temporary file left behind


def test_a_file_with_one_byte_changed_is_refused_by_name_and_nothing_is_placed(served, tmp_path):
    url, folder = served
    label = folder / "cls-books/train.label"
    label.write_bytes(label.read_bytes().replace(b"1", b"2", 1))  # the same size, one byte changed
    destination = tmp_path / "raw"
    with pytest.raises(DataSourceError) as caught:
        gather(destination, _manifest(), url=url)
    message = str(caught.value)
    assert "cls-books/train.label: its sha256 is not the pinned" in message and "someone/course at 0123456" in message
    assert "train.review.spm" not in message  # only the bad file is named
    assert _tree(destination) == {}


def test_a_cut_file_says_so_and_the_files_already_in_place_stay(served, tmp_path):
    url, folder = served
    destination = tmp_path / "raw"
    gather(destination, _manifest(), url=url)
    before = _tree(destination)
    (destination / "dict.txt").write_text("▁Ce 10\n", encoding="utf-8")  # damaged in place: fetched again
    spm = folder / "cls-books/train.review.spm"
    spm.write_bytes(spm.read_bytes()[:10])  # ... but the server's copy of another file is cut short
    (destination / "cls-books/train.review.spm").unlink()
    with pytest.raises(DataSourceError, match=r"train.review.spm: 10 bytes where the file of someone/course at "
                                               r"0123456 has [\d,]+ \(cut short"):
        gather(destination, _manifest(), url=url)
    assert (destination / "dict.txt").read_text(encoding="utf-8") == "▁Ce 10\n"  # nothing replaced on failure
    assert (destination / "cls-books/train.label").read_bytes() == before["cls-books/train.label"]


def test_a_missing_required_file_is_named_a_missing_optional_one_left_out_and_a_flat_folder_works(tmp_path):
    source = _repository_copy(tmp_path / "clone", skip=("dict.txt", "pretrained_model_4layers.pt"))
    with pytest.raises(DataSourceError, match=r"dict.txt: missing in .*clone; copy it from a clone of someone/course"):
        gather(tmp_path / "raw", _manifest(), source=source)
    _repository_copy(source)
    (source / "pretrained_model_4layers.pt").unlink()
    present = gather(tmp_path / "raw", _manifest(), source=source)
    assert "pretrained_model_4layers.pt" not in present and "dict.txt" in present
    flat = tmp_path / "flat"  # a flat folder works as well as a clone
    flat.mkdir()
    for path, text in CONTENTS.items():
        (flat / Path(path).name).write_text(text, encoding="utf-8")
    present = gather(tmp_path / "flat-raw", _manifest(), source=flat)
    assert (tmp_path / "flat-raw/cls-books/train.label").read_text() == CONTENTS["cls-books/train.label"]
    assert len(present) == len(CONTENTS)


def test_the_git_blob_id_is_gits_own_and_pins_every_file_of_the_commit(tmp_path):
    sample = tmp_path / "sample.txt"
    sample.write_bytes("Ce livre est très bien.\n".encode())
    if shutil.which("git"):
        assert git_blob_id(sample) == subprocess.run(["git", "hash-object", str(sample)], capture_output=True,
                                                     text=True, check=True).stdout.strip()
    assert all(len(f.git_blob) == 40 for f in PINNED)
    assert {f.path for f in PINNED if f.required} == {
        *(f"cls-books/{split}.{kind}" for split in ("train", "valid", "test") for kind in ("review.spm", "label")),
        "dict.txt", "sentencepiece.french.model"}
    assert all(f.sha256 and f.size for f in PINNED if f.required)


def test_a_manifest_file_names_its_problem(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"files": [{"path": "dict.txt"}]}), encoding="utf-8")
    with pytest.raises(DataSourceError, match="every file needs a git_blob or a sha256"):
        read_manifest(path)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(DataSourceError, match="manifest.json: not a course manifest"):
        read_manifest(path)
    path.write_text(json.dumps({"commit": "abc", "files": [{"path": "dict.txt", "sha256": "0" * 64}]}))
    assert read_manifest(path).files[0].sha256 == "0" * 64
