"""The course's files (lab 2 of ALTEGRAD, github.com/moussaKam/transfer_learning_transformers) at a pinned commit,
each checked by its git blob id (and sha256 and size where known) before any is placed: a bad file is named."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from lmtransfer.core.errors import DataSourceError
from lmtransfer.core.io import sha256_of

REPOSITORY = "moussaKam/transfer_learning_transformers"
COMMIT = "b14c34637f62e5c6ebf86401be0f6aba1099e8ba"  # "Add files", 2020-12-01: the lab's data
DEFAULT_URL = f"https://raw.githubusercontent.com/{REPOSITORY}/{COMMIT}"
LANGUAGE_MODEL = "pretrained_model_4layers.pt"  # the course's French LM (with its LM head): loaded when present
PRETRAINING_TEXT = "pretraining_subset.txt"  # the course's pretraining text: the corpus when the LM is absent


@dataclass(frozen=True)
class CourseFile:
    path: str  # in the repository, and under the destination folder
    git_blob: str  # git's id of the file at COMMIT: sha1 of b"blob <size>\0" + its bytes
    size: int | None = None  # bytes; None where no copy was at hand to measure
    sha256: str | None = None
    required: bool = True  # the experiment cannot run without it (the large optional files may be absent)


PINNED = (
    CourseFile("cls-books/train.review.spm", "933ca8a472c8bf9b5f49bd1b07304a2913af106a", 1495960,
               "a919c60894139d9ea30bd11fd3ea8869de03df493a486dd9b2be4f6e809ae232"),
    CourseFile("cls-books/train.label", "d30d763e0ee510a71ef677fcf130eee2de738400", 3200,
               "0ad0e86a0c4ca0d62af1f72d3a36afaa115c6904f77469cd70c1931fa8587775"),
    CourseFile("cls-books/valid.review.spm", "e917bcd63b497f10d0552168ef5222f46da26b0e", 388465,
               "4aa27090cc88994ecb65fec15419313405d69c9189c8eb02ef808235633c2693"),
    CourseFile("cls-books/valid.label", "2b0d5bbc5ed15473356538fcebbf78b4fc0deac5", 800,
               "d80cdb6574ed4efbb00a124fc054c96d4b5e1ce55210b92fa0419350b7a92b3c"),
    CourseFile("cls-books/test.review.spm", "4ca624ebeb7a311a7a8a6de4747648a83cc6e352", 1864544,
               "5d0322e84d5b433dd1072a81f7b62af4ee4adef400651b51b1efca9929fe2890"),
    CourseFile("cls-books/test.label", "7860b56cf6abf2ed94089d7d7905c28f1de3a2d2", 4000,
               "28c78495388f7a1fac01120ef7ca73e0dd9a035ac91101ba7fe27fc155289933"),
    CourseFile("dict.txt", "522da0a550ee9d5008c21b68f77154e096c2bb4d", 577587,
               "f587552218e9623edcaaa70d8762799f28b0f98f86b41657e21a9e02cfce4e8c"),
    CourseFile("sentencepiece.french.model", "fd27683e4285a3c7eeb91c2bd627ef39ae5c8201", 1115362,
               "4cc472d2d984575d2d1774cfc0150ff9acad6f4430f2f34901d3a30062cd164b"),
    CourseFile(LANGUAGE_MODEL, "fa007e8b7f0b939113a7e05b432e7bc68111da4b", required=False),
    CourseFile(PRETRAINING_TEXT, "faf6fd3902a9b043df6f80fc2017a3a966b31787", required=False),
)


@dataclass(frozen=True)
class Manifest:
    """What to fetch and how to check it: the pinned commit's files, or a fork's."""
    files: tuple[CourseFile, ...] = PINNED
    commit: str = COMMIT
    repository: str = REPOSITORY


def read_manifest(path: Path) -> Manifest:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        files = tuple(CourseFile(entry["path"], entry.get("git_blob", ""), entry.get("size"), entry.get("sha256"),
                                 entry.get("required", True)) for entry in raw["files"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataSourceError(f"{path}: not a course manifest ({exc}); see `lmtransfer course --help`") from None
    if not all(f.git_blob or f.sha256 for f in files):
        raise DataSourceError(f"{path}: every file needs a git_blob or a sha256 to be checked against")
    return Manifest(files, raw.get("commit", "?"), raw.get("repository", "?"))


def git_blob_id(path: Path) -> str:
    """`git hash-object`."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def problem(path: Path, pinned: CourseFile, manifest: Manifest) -> str | None:
    """Why `path` is not the pinned file, or None: its size first, so a cut download says so."""
    where = f"{manifest.repository} at {manifest.commit[:7]}"
    size = path.stat().st_size
    if pinned.size is not None and size != pinned.size:
        cut = " (cut short: an interrupted download?)" if size < pinned.size else ""
        return f"{pinned.path}: {size:,} bytes where the file of {where} has {pinned.size:,}{cut}"
    for name, expected, digest in (("sha256", pinned.sha256, sha256_of), ("git blob id", pinned.git_blob, git_blob_id)):
        if expected and digest(path) != expected:
            return f"{pinned.path}: its {name} is not the pinned {expected[:12]}…: not the file of {where}"
    return None


def _in_folder(folder: Path, pinned: CourseFile) -> Path | None:
    return next((c for c in (folder / pinned.path, folder / Path(pinned.path).name) if c.is_file()), None)


def _download(url: str, target: Path) -> bool:
    """`url` into `target`; False when the server has no such file (404)."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response, target.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise DataSourceError(f"{url}: HTTP {exc.code} {exc.reason}; try again, or --from a clone") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DataSourceError(f"{url}: cannot download ({getattr(exc, 'reason', exc)}); on a machine without "
                              "network, copy the files and pass --from FOLDER") from None
    return True


def gather(destination: Path, manifest: Manifest = Manifest(), source: Path | None = None,
           url: str = DEFAULT_URL) -> dict[str, Path]:
    """Every file of `manifest` checked and in `destination`; returns those present. The missing or wrong ones come
    from `source` (a folder or clone) or `url`, moved into place only when every required file checks out."""
    destination.mkdir(parents=True, exist_ok=True)
    present, fetched, problems = {}, {}, []
    with tempfile.TemporaryDirectory(dir=destination, prefix=".fetch-") as tmp:
        for pinned in manifest.files:
            placed = destination / pinned.path
            if placed.is_file() and problem(placed, pinned, manifest) is None:
                present[pinned.path] = placed
                continue
            candidate = _fetch_one(pinned, Path(tmp), source, url)
            if candidate is None:
                if pinned.required:
                    where = f"in {source}" if source else f"at {url}/{pinned.path}"
                    problems.append(f"{pinned.path}: missing {where}; copy it from a clone of {manifest.repository} "
                                    f"at {manifest.commit[:7]}")
                continue
            issue = problem(candidate, pinned, manifest)
            if issue and source is not None:
                problems.append(f"{issue}; replace {_in_folder(source, pinned)} with the file of a clone at "
                                f"{manifest.commit[:7]}")
            elif issue:
                problems.append(f"{issue}; run the command again to download it anew, or pass --from a clone")
            else:
                fetched[pinned.path] = candidate
        if problems:
            raise DataSourceError("the course's files are not the pinned ones, nothing was changed in "
                                  f"{destination}:\n  " + "\n  ".join(problems))
        for name, candidate in fetched.items():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(candidate), target)
            present[name] = target
    return present


def _fetch_one(pinned: CourseFile, tmp: Path, source: Path | None, url: str) -> Path | None:
    target = tmp / pinned.path.replace("/", "__")
    if source is None:
        print(f"course: downloading {pinned.path}", flush=True)
        return target if _download(f"{url}/{pinned.path}", target) else None
    found = _in_folder(source, pinned)
    return None if found is None else shutil.copyfile(found, target)
