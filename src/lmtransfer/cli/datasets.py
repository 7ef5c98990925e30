"""`lmtransfer imdb`: the Large Movie Review Dataset fetched (or taken from a local copy), checked and kept, once."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable


def cmd_imdb(args: argparse.Namespace) -> None:
    from lmtransfer.classification.data.imdb_release import ACL_IMDB_V1, imdb_reviews

    release = dataclasses.replace(ACL_IMDB_V1, url=args.url) if args.url else ACL_IMDB_V1
    kept = imdb_reviews(args.source or "", release)
    counts = ", ".join(f"{pin.folder} {pin.files:,}" for pin in release.folders)
    print(f"imdb: {sum(pin.files for pin in release.folders):,} reviews of {release.archive_name} checked and kept "
          f"in {kept} ({counts})")
    print("imdb: use them with `data.source: imdb` (25,000 train / 25,000 test as published) or "
          "`data.corpus: [imdb-reviews]` (the 75,000 train and unlabeled reviews as any source's corpus)")


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    imdb = command(
        "imdb", "get the Large Movie Review Dataset (100,000 IMDB reviews) once: fetched, checked, kept",
        "Downloads Stanford's aclImdb_v1.tar.gz into the dataset cache (84 MB, once), or takes a local copy of it "
        "or of its unpacked aclImdb/ folder, checks it against the pinned release (the archive's size and sha256; "
        "a folder's files, bytes and content folder by folder) and keeps its reviews as text, one a line. A missing, "
        "cut or changed file is named in one line and nothing is kept. The pipeline does the same on its first run "
        "with data.source: imdb or data.corpus: [imdb-reviews]; this gets it ahead, e.g. before going offline.",
    )
    imdb.add_argument("--from", dest="source", metavar="PATH",
                      help="a local aclImdb_v1.tar.gz, or its unpacked aclImdb/ folder (as data.imdb_from)")
    imdb.add_argument("--url", help="download from this address instead (a mirror; checked all the same)")
    imdb.set_defaults(func=cmd_imdb)
