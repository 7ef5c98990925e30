"""The translation pipeline's evaluate stage: every fine-tuned seed of both variants translates the test split (beam
search) and the test verses' clause pairs (short sentences); BLEU and chrF with sacreBLEU, the gap and its interval;
the translations beside the references. The stage script calls `run_translation_evaluate_stage` alone."""

from __future__ import annotations

import pandas as pd

from lmtransfer.core.io import atomic_path, read_json, read_tsv, require_file, write_json
from lmtransfer.core.paths import (
    EVALUATE_DETAILS,
    EVALUATE_REPORT,
    HEADLINE,
    PREPARED,
    TOKENIZED,
    VARIANTS,
    PretrainOutputs,
    finetune_epochs,
)
from lmtransfer.harness.tracking import log_file, log_run, log_to_pipeline, runs_that_wrote, stage_run
from lmtransfer.modeling.runtime import select_device, use_share_of_cores
from lmtransfer.reporting.finetuned import finetuned_checkpoints
from lmtransfer.tokens.tokenized import load_pair_split
from lmtransfer.tokens.tokenizer import load_tokenizer
from lmtransfer.training.resume import clear_finished_snapshots
from lmtransfer.translation.config import TranslationParams
from lmtransfer.translation.data.clauses import short_test_pairs
from lmtransfer.translation.data.parallel import read_pairs
from lmtransfer.translation.evaluate import report_lines, translation_headline, translation_report
from lmtransfer.translation.translator import (
    DecodingOptions,
    load_translation_model,
    translate_sources,
    translate_texts,
)

TRANSLATIONS = EVALUATE_DETAILS / "test_translations.tsv"
CLAUSE_TRANSLATIONS = EVALUATE_DETAILS / "test_clause_translations.tsv"


def write_translations(path, sources: list[str], references: list[str],
                       translations: dict[str, dict[int, list[str]]]) -> None:
    """Every model's translation beside the source and the reference, one test sentence per row."""
    table = pd.DataFrame({"source": sources, "reference": references,
                          **{f"{v}_seed{s}": translations[v][s] for v in VARIANTS for s in sorted(translations[v])}})
    with atomic_path(path) as tmp:
        table.to_csv(tmp, sep="\t", index=False)


def run_translation_evaluate_stage(params: TranslationParams) -> None:
    """Translate test with every fine-tuned checkpoint; write the report, the headline and the translations."""
    seeds = params.finetune.seeds
    pairs = read_pairs(PREPARED, "test")
    test = load_pair_split(TOKENIZED, "test")
    tokenizer = load_tokenizer(TOKENIZED)
    pretraining = read_json(require_file(PretrainOutputs().summary, "pretraining results"))
    checkpoints = finetuned_checkpoints(seeds)
    upstream = runs_that_wrote(checkpoints.values())
    device = select_device("auto")
    use_share_of_cores()
    e = params.evaluate
    options = DecodingOptions(e.beam_size, e.length_penalty, e.max_length_ratio, e.max_length_extra, e.batch_size)
    sources = [test.source(i) for i in range(len(test))]
    clauses = short_test_pairs(pairs, read_pairs(PREPARED, "train"))
    clause_sources, clause_references = [s for s, _ in clauses], [t for _, t in clauses]
    with stage_run("evaluate", params.sections("evaluate"), upstream_run_id=upstream,
                   clear_snapshots=clear_finished_snapshots):
        log_run(params={"finetune.seeds": seeds})
        translations: dict[str, dict[int, list[str]]] = {v: {} for v in VARIANTS}
        clause_translations: dict[str, dict[int, list[str]]] = {v: {} for v in VARIANTS}
        for (variant, seed), path in checkpoints.items():
            model = load_translation_model(path, device)
            translations[variant][seed] = translate_sources(model, sources, tokenizer, options, device,
                                                            desc=f"evaluate {variant}@{seed}")
            clause_translations[variant][seed] = translate_texts(model, clause_sources, tokenizer, options, device)
        first_epoch = {v: [float(read_tsv(require_file(finetune_epochs(v, s), "fine-tuning metrics"))[0]["val_bleu"])
                           for s in seeds] for v in VARIANTS}
        report = translation_report(translations, list(pairs["target"]), list(pairs["source"]), e.bootstrap_samples,
                                    e.seed, first_epoch_bleu=first_epoch)
        if clauses:
            report["clauses"] = translation_report(clause_translations, clause_references, clause_sources,
                                                   e.bootstrap_samples, e.seed)
        headline = translation_headline(report, pretraining)
        write_json(EVALUATE_REPORT, report)
        write_json(HEADLINE, headline)
        write_translations(TRANSLATIONS, list(pairs["source"]), list(pairs["target"]), translations)
        write_translations(CLAUSE_TRANSLATIONS, clause_sources, clause_references, clause_translations)
        log_run(metrics={**{f"gap_{k}": v for k, v in report["gap"].items()},
                         **{f"{v}_{k}": report[v][k] for v in VARIANTS for k in ("bleu_mean", "chrf_mean")}})
        log_file(report, "evaluate.json")
        log_file(TRANSLATIONS, "")
        log_file(CLAUSE_TRANSLATIONS, "")
        log_to_pipeline(headline)
    print("\n".join(f"evaluate: {line}" for line in report_lines(report)))

