"""imdb: the Large Movie Review Dataset as a labeled source (ULMFiT's benchmark), its pinned release
(`lmtransfer.classification.data.imdb_release`).

Its published splits are kept: 25,000 train and 25,000 test reviews, half positive, half negative; validation is
carved from train (`data.valid_fraction`, stratified). Its corpus is the 50,000 unlabeled reviews (`train/unsup`);
with `data.add_train_to_corpus` the train reviews join it, never a validation or test review.
"""

from __future__ import annotations

import pandas as pd

from lmtransfer.classification.config import DataParams
from lmtransfer.classification.data.raw import RawData
from lmtransfer.classification.data.imdb_release import ACL_IMDB_V1, ReviewLines, imdb_reviews

LABEL_NAMES = ["negative", "positive"]


def _labeled(kept, split: str) -> pd.DataFrame:
    """A published split: its negative reviews, then its positive ones, each in the release's file order."""
    tables = []
    for label in LABEL_NAMES:
        path = kept / ACL_IMDB_V1.folder(f"{split}/{label[:3]}").kept_as
        texts = list(ReviewLines([path]))
        tables.append(pd.DataFrame({"text": texts, "label": [label] * len(texts)}))
    return pd.concat(tables, ignore_index=True)


def load_imdb(params: DataParams) -> RawData:
    kept = imdb_reviews(params.imdb_from)
    return RawData(
        splits={"train": _labeled(kept, "train"), "test": _labeled(kept, "test")},
        corpus=ReviewLines([kept / ACL_IMDB_V1.folder("train/unsup").kept_as]),
        label_names=LABEL_NAMES,
        origins={"train": "IMDb's train/pos and train/neg", "test": "IMDb's test/pos and test/neg"},
        archive_sha256=ACL_IMDB_V1.digest,
    )
