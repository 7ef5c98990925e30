"""The classification prepare stage: the data source's texts deduplicated, split without leakage, and the pretraining
corpus, into data/prepared/."""

from __future__ import annotations

from lmtransfer.classification.config import DataParams
from lmtransfer.classification.data.prepare import describe_removals, write_prepared
from lmtransfer.core.paths import PREPARED, PREPARED_CORPUS
from lmtransfer.data.prepared import read_corpus_meta
from lmtransfer.harness.tracking import log_file, log_run, stage_run


def run_prepare_stage(params: DataParams, logged: dict) -> None:
    """The source read (a bad file stops before any output is replaced), then splits and corpus written."""
    from lmtransfer.classification.data.sources import load_source

    raw = load_source(params)
    with stage_run("prepare", logged):
        meta = write_prepared(raw, params, PREPARED, params.source)
        corpus_lines = read_corpus_meta(PREPARED)["corpus_lines"]
        log_run(metrics={**{f"examples_{k}": v for k, v in meta["examples"].items()},
                         **{f"corpus_lines_{k}": v for k, v in corpus_lines.items()},
                         **{f"removed_{k}": v for k, v in meta["removed"].items()},
                         "n_classes": len(meta["label_names"])})
        log_file(meta, "prepared_meta.json")
    for line in describe_removals(meta):
        print(f"prepare: {line}")
    print(f"prepare: {meta['examples']} labeled examples in {len(meta['label_names'])} classes -> {PREPARED}, "
          f"{corpus_lines} corpus lines -> {PREPARED_CORPUS}")
