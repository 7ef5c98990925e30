"""The translation prepare stage: the pair source's sentence pairs cleaned and split, and the corpus of both languages,
into data/prepared/."""

from __future__ import annotations

from lmtransfer.translation.config import TranslationParams
from lmtransfer.translation.data.parallel import load_parallel, write_parallel


def run_prepare_stage(params: TranslationParams, logged: dict) -> None:
    """The translation pipeline's prepare stage: the pairs read, and every input a later stage reads checked
    (`translation/inputs.py`; a bad one stops here, before any output is replaced), split leak-free and written
    with the corpus of both languages."""
    from lmtransfer.core.paths import PREPARED, PREPARED_CORPUS
    from lmtransfer.harness.tracking import log_file, log_run, stage_run
    from lmtransfer.translation.inputs import check_inputs

    data = load_parallel(params.data)
    check_inputs(params, data)
    with stage_run("prepare", logged):
        meta = write_parallel(data, PREPARED, {"source": params.data.source})
        log_run(metrics={**{f"pairs_{k}": v for k, v in meta["pairs"].items()},
                         **{f"corpus_lines_{k}": v for k, v in meta["corpus_lines"].items()}})
        log_file(meta, "prepared_meta.json")
    for reason, count in meta["removed"].items():
        print(f"prepare: removed {count:,} train pairs ({reason.replace('_', ' ')})")
    if meta["clause_pairs"]:
        print(f"prepare: {meta['clause_pairs']:,} clause pairs cut from longer training pairs joined train "
              "(data.clause_pairs)")
    print(f"prepare: {meta['pairs']} sentence pairs -> {PREPARED}, {meta['corpus_lines']} corpus lines (both "
          f"languages) -> {PREPARED_CORPUS}")
