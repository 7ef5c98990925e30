"""The Large Movie Review Dataset (Maas et al., ACL 2011): 100,000 IMDB reviews, pinned, checked, kept once as text.

`aclImdb_v1.tar.gz` (downloaded, or a local copy) or its unpacked `aclImdb/` is checked against the pins, then kept
as one file per folder, a review a line in file-name order; `checked.json` names a cache damaged later.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lmtransfer.core.errors import DataSourceError
from lmtransfer.core.io import atomic_directory, sha256_of
from lmtransfer.data.normalize import normalize_text
from lmtransfer.data.pinned import cache_dir


@dataclass(frozen=True)
class FolderPin:
    """`sha256`: `find aclImdb/<folder> -type f | LC_ALL=C sort | xargs sha256sum | sha256sum`."""

    folder: str
    files: int
    bytes: int
    sha256: str

    @property
    def kept_as(self) -> str:
        return self.folder.replace("/", "-") + ".txt"


@dataclass(frozen=True)
class ImdbRelease:
    archive_name: str
    archive_bytes: int
    archive_sha256: str
    url: str
    folders: tuple[FolderPin, ...]
    version: str

    def folder(self, name: str) -> FolderPin:
        return next(pin for pin in self.folders if pin.folder == name)

    @property
    def digest(self) -> str:  # one id for the release's reviews
        return hashlib.sha256("".join(pin.sha256 for pin in self.folders).encode()).hexdigest()


ACL_IMDB_V1 = ImdbRelease(
    archive_name="aclImdb_v1.tar.gz",
    archive_bytes=84_125_825,
    archive_sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
    url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
    folders=(
        FolderPin("train/pos", 12_500, 16_842_831, "fcf8994f7da5587d4d17bbc9a4d42a4f2d18a986acdffe41b1c048f94b6ec868"),
        FolderPin("train/neg", 12_500, 16_289_992, "3c02553a9f85dd0ad389f001e70eecbaed6347089d25f069b27cdb7c970d7d6a"),
        FolderPin("train/unsup", 50_000, 66_506_794,
                  "ead865c8590b3e71d09b461523ac8b17f96a19344e8334c84ee3103f32cf4276"),
        FolderPin("test/pos", 12_500, 16_283_357, "96bf5150fc4a4be4fdd49416f4f81c23336d0c22a59d8f82310f6aa94d3da369"),
        FolderPin("test/neg", 12_500, 16_067_328, "41006e123cbae39aa99e53cb099fd039c7bb3b7e05e7e6089490cc59c7647513"),
    ),
    version="v1",
)

TOP = "aclImdb"
_LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_REVIEW_NAME = re.compile(r"(\d+)_(\d+)\.txt")


def review_text(raw: bytes, origin: str) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataSourceError(f"{origin}: not UTF-8 text ({exc})") from None
    return normalize_text(_LINE_BREAK.sub(" ", text))


class _FolderDigest:
    """A folder's files, bytes and listing sha256, computed on the way, against its pin."""

    def __init__(self, pin: FolderPin):
        self.pin, self.listing, self.bytes = pin, [], 0  # listing: (file name, sha256)

    def add(self, name: str, raw: bytes) -> None:
        self.listing.append((name, hashlib.sha256(raw).hexdigest()))
        self.bytes += len(raw)

    @property
    def sha256(self) -> str:
        listing = sorted(self.listing, key=lambda entry: entry[0].encode())
        return hashlib.sha256("".join(f"{sha}  {TOP}/{self.pin.folder}/{name}\n" for name, sha in listing)
                              .encode()).hexdigest()

    def problem(self, where: str) -> str | None:
        """Why this is not the pinned folder (None when it is): count first, then bytes, then content."""
        pin, found, label = self.pin, len(self.listing), f"{where}/{self.pin.folder}"
        if found != pin.files:
            return f"{label}: {found:,} review files where the pinned release has {pin.files:,}{_odd_names(self)}"
        if self.bytes != pin.bytes:
            cut = " (a file cut short?)" if self.bytes < pin.bytes else ""
            return f"{label}: {self.bytes:,} bytes of reviews where the pinned release has {pin.bytes:,}{cut}"
        if self.sha256 != pin.sha256:
            return (f"{label}: the content of a file differs from the pinned release's (same {found:,} files and "
                    f"bytes; the sha256 of its listing is not {pin.sha256[:12]}…)")
        return None


def measure_folder(root: Path, folder: str) -> FolderPin:  # a test's miniature release
    digest = _FolderDigest(FolderPin(folder, 0, 0, ""))
    for entry in os.scandir(root / folder):
        if entry.is_file():
            digest.add(entry.name, Path(entry.path).read_bytes())
    return FolderPin(folder, len(digest.listing), digest.bytes, digest.sha256)


def _odd_names(digest: _FolderDigest) -> str:
    """The first id missing from 0..n-1 (the files are `<id>_<rating>.txt`), or a name out of place."""
    ids = set()
    for name, _ in digest.listing:
        match = _REVIEW_NAME.fullmatch(name)
        if not match:
            return f" ({name} is not a review file's name)"
        ids.add(int(match[1]))
    missing = next((i for i in range(digest.pin.files) if i not in ids), None)
    return f" (none named {missing}_*.txt)" if missing is not None else ""


def keep_from_archive(archive: Path, release: ImdbRelease, out: Path) -> None:
    """Stream the archive (checked by `check_archive`) once: each review kept as a line in file-name order."""
    wanted = {f"{TOP}/{pin.folder}/": pin for pin in release.folders}
    lines: dict[str, dict[str, bytes]] = {pin.folder: {} for pin in release.folders}  # folder -> file name -> line
    try:
        with tarfile.open(archive, "r|gz") as tar:
            for member in tar:
                folder, _, name = member.name.rpartition("/")
                pin = wanted.get(folder + "/")
                if pin is None or not member.isfile():
                    continue
                handle = tar.extractfile(member)
                raw = handle.read() if handle else b""
                lines[pin.folder][name] = (review_text(raw, f"{archive}:{member.name}") + "\n").encode("utf-8")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataSourceError(f"{archive}: cannot be read as a gzipped tar archive ({exc})") from None
    for pin in release.folders:
        kept = lines[pin.folder]
        (out / pin.kept_as).write_bytes(b"".join(kept[name] for name in sorted(kept, key=str.encode)))


def keep_from_folder(folder: Path, release: ImdbRelease, out: Path) -> None:
    """An unpacked copy, folder by folder in file-name order: each checked against its pin before the next."""
    for pin in release.folders:
        where = folder / pin.folder
        if not where.is_dir():
            raise DataSourceError(f"{where}: folder not found; the unpacked {TOP}/ of the release has {pin.files:,} "
                                  f"reviews there")
        digest = _FolderDigest(pin)
        names = sorted((entry.name for entry in os.scandir(where) if entry.is_file()), key=str.encode)
        with open(out / pin.kept_as, "wb") as kept:
            for name in names:
                raw = (where / name).read_bytes()
                digest.add(name, raw)
                kept.write((review_text(raw, str(where / name)) + "\n").encode("utf-8"))
        problem = digest.problem(str(folder))
        if problem:
            raise DataSourceError(problem)


def download(url: str, target: Path, release: ImdbRelease) -> None:
    print(f"downloading the Large Movie Review Dataset ({release.archive_bytes / 1e6:.0f} MB, once) from {url}",
          flush=True)
    try:
        with urllib.request.urlopen(url, timeout=120) as response, open(target, "wb") as out:
            done, shown = 0, 0
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
                done += len(block)
                if done * 10 // release.archive_bytes > shown:
                    shown = done * 10 // release.archive_bytes
                    print(f"  {done / 1e6:.0f} of {release.archive_bytes / 1e6:.0f} MB", flush=True)
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: not a URL
        raise DataSourceError(f"could not download {url}: {getattr(exc, 'reason', exc)}; or give a local copy of "
                              f"{release.archive_name} (or its unpacked {TOP}/ folder) as data.imdb_from") from None


def check_archive(path: Path, release: ImdbRelease, advice: str = "delete it and retry") -> None:
    """The pinned archive, or one line saying how this file differs: size first, so a cut download says so."""
    size = path.stat().st_size
    if size != release.archive_bytes:
        cut = " (cut short: an interrupted download?)" if size < release.archive_bytes else ""
        raise DataSourceError(f"{path}: {size:,} bytes where {release.archive_name} has {release.archive_bytes:,}"
                              f"{cut}; {advice}")
    actual = sha256_of(path)
    if actual != release.archive_sha256:
        raise DataSourceError(f"{path}: sha256 {actual[:12]}… is not the pinned {release.archive_sha256[:12]}… of "
                              f"{release.archive_name}: a changed or different file; {advice}")


def fetch_archive(release: ImdbRelease, directory: Path) -> Path:
    target = directory / release.archive_name
    if target.is_file():
        check_archive(target, release)
        return target
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        downloaded = Path(tmp) / release.archive_name
        download(release.url, downloaded, release)
        check_archive(downloaded, release)
        shutil.move(str(downloaded), target)
    return target


def _stamp(kept: Path) -> dict:
    try:
        return json.loads((kept / "checked.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def imdb_reviews(source: str = "", release: ImdbRelease = ACL_IMDB_V1, directory: Path | None = None) -> Path:
    """The folder of kept review files: made once from `source` (an archive or an unpacked folder; '' = the cache's
    archive, downloaded when absent), then reused while its files are those that were checked."""
    directory = directory or cache_dir()
    kept = directory / f"imdb-reviews-{release.version}"
    stamp = _stamp(kept)
    if stamp.get("release") == release.digest:
        for pin in release.folders:
            path = kept / pin.kept_as
            if not path.is_file() or sha256_of(path) != stamp.get("files", {}).get(pin.kept_as):
                raise DataSourceError(f"{path}: not the reviews that were checked and kept there (changed or missing "
                                      f"since); delete the folder {kept} and run again")
        return kept
    try:
        directory.mkdir(parents=True, exist_ok=True)
        origin = _local_copy(source) if source else fetch_archive(release, directory)
        if origin.is_dir():
            root = origin / TOP if (origin / TOP).is_dir() else origin
            print(f"checking the reviews of {root} against the pinned release (once)", flush=True)
            with atomic_directory(kept) as building:
                keep_from_folder(root, release, building)
                _write_stamp(building, release, str(root))
        elif origin.is_file():
            check_archive(origin, release, "not the release's archive (data.imdb_from)")
            print(f"reading the reviews out of {origin} (once)", flush=True)
            with atomic_directory(kept) as building:
                keep_from_archive(origin, release, building)
                _write_stamp(building, release, release.archive_sha256)
        else:
            raise DataSourceError(f"{source}: not found (set by data.imdb_from: {release.archive_name} or its "
                                  f"unpacked {TOP}/ folder)")
    except OSError as exc:
        raise DataSourceError(f"the dataset cache {directory} cannot hold the reviews ({exc.strerror or exc}); set "
                              "LMTRANSFER_CACHE_DIR to a writable folder") from None
    return kept


def _local_copy(source: str) -> Path:
    """`data.imdb_from` as given, or under the repository root (DVC_ROOT) when a `dvc exp run --temp` copy lacks
    it (a git-ignored folder is not copied there)."""
    path = Path(source).expanduser()
    if not path.is_absolute() and not path.exists() and os.environ.get("DVC_ROOT"):
        rooted = Path(os.environ["DVC_ROOT"]) / path
        if rooted.exists():
            return rooted
    return path


def _write_stamp(building: Path, release: ImdbRelease, origin: str) -> None:
    files = {pin.kept_as: sha256_of(building / pin.kept_as) for pin in release.folders}
    (building / "checked.json").write_text(json.dumps({"release": release.digest, "checked_from": origin,
                                                       "files": files}, indent=1) + "\n", encoding="utf-8")


@dataclass
class ReviewLines:
    paths: list[Path]

    def __iter__(self) -> Iterator[str]:
        for path in self.paths:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    yield line.rstrip("\n")
