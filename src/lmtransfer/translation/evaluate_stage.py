"""The translation evaluate stage: every fine-tuned run translates the test split, the test verses' clause pairs and
the lab's sentences; BLEU and chrF, the gap and its interval; the translations beside the references."""

from __future__ import annotations

import pandas as pd

from lmtransfer.core import paths
from lmtransfer.core.io import atomic_path, read_json, read_tsv, require_file, write_json
from lmtransfer.core.paths import EVALUATE_DETAILS, PREPARED, TOKENIZED, VARIANTS
from lmtransfer.harness.tracking import log_file, log_run, log_to_pipeline, runs_that_wrote, stage_run
from lmtransfer.modeling.runtime import select_device, use_share_of_cores
from lmtransfer.reporting.finetuned import finetuned_checkpoints, run_names
from lmtransfer.tokens.id_files import load_pair_split
from lmtransfer.tokens.tokenizer import load_tokenizer
from lmtransfer.training.resume import clear_finished_snapshots
from lmtransfer.translation import translator
from lmtransfer.translation.config import TranslationParams
from lmtransfer.translation.data.clauses import short_test_pairs
from lmtransfer.translation.data.pairs import read_lab_sentences
from lmtransfer.translation.evaluate import lab_report, report_lines, translation_headline, translation_report
from lmtransfer.translation.prepare_stage import read_pairs

TRANSLATIONS = EVALUATE_DETAILS / "test_translations.tsv"
CLAUSE_TRANSLATIONS = EVALUATE_DETAILS / "test_clause_translations.tsv"
LAB_TRANSLATIONS = EVALUATE_DETAILS / "lab_sentences.tsv"


def write_translations(path, sources: list[str], references: list[str],
                       translations: dict[str, dict[str, list[str]]]) -> None:
    table = pd.DataFrame({"source": sources, "reference": references,
                          **{f"{v}_seed{r}": translations[v][r] for v in VARIANTS for r in sorted(translations[v])}})
    with atomic_path(path) as tmp:
        table.to_csv(tmp, sep="\t", index=False)


def pretraining_summary(pretrain_seeds: list[int]) -> dict:
    summaries = [read_json(require_file(paths.PretrainOutputs(seed).summary, "pretraining results"))
                 for seed in pretrain_seeds]
    per_run = [summary["val_perplexity"] for summary in summaries]
    return {"val_perplexity": sum(per_run) / len(per_run), "val_perplexity_per_run": per_run,
            "cpu_model": summaries[0].get("cpu_model")}  # where the results were made (a reference checks it)


def run_evaluate_stage(params: TranslationParams) -> None:
    runs = run_names(params.pretrain.seeds, params.finetune.seeds)
    pairs = read_pairs(PREPARED, "test")
    test = load_pair_split(TOKENIZED, "test")
    tokenizer = load_tokenizer(TOKENIZED)
    lab_sources, lab_references = read_lab_sentences(params.evaluate.lab_sentences)  # before any model loads
    pretraining = pretraining_summary(params.pretrain.seeds)
    checkpoints = finetuned_checkpoints(runs)
    upstream = runs_that_wrote(checkpoints.values())
    device = select_device("auto")
    use_share_of_cores()
    e = params.evaluate
    options = translator.DecodingOptions(e.beam_size, e.length_penalty, e.max_length_ratio, e.max_length_extra,
                                         e.batch_size)
    sources = [test.source(i) for i in range(len(test))]
    clauses = short_test_pairs(pairs, read_pairs(PREPARED, "train"))
    clause_sources, clause_references = [s for s, _ in clauses], [t for _, t in clauses]
    with stage_run("evaluate", params.sections("evaluate"), upstream_run_id=upstream,
                   clear_snapshots=clear_finished_snapshots):
        log_run(params={"finetune.seeds": params.finetune.seeds, "pretrain.seeds": params.pretrain.seeds})
        translations, clause_translations, lab_translations = ({v: {} for v in VARIANTS} for _ in range(3))
        for (variant, run), path in checkpoints.items():
            model = translator.load_translation_model(path, device)
            translations[variant][run] = translator.translate_sources(model, sources, tokenizer, options, device,
                                                                      desc=f"evaluate {variant}@{run}")
            for texts, translated in ((clause_sources, clause_translations), (lab_sources, lab_translations)):
                translated[variant][run] = translator.translate_texts(model, texts, tokenizer, options, device)
        first_epoch = {v: [float(read_tsv(require_file(paths.finetune_epochs(v, r), "fine-tuning metrics"))[0]
                                 ["val_bleu"]) for r in runs] for v in VARIANTS}
        report = translation_report(translations, list(pairs["target"]), list(pairs["source"]), e.bootstrap_samples,
                                    e.seed, first_epoch_bleu=first_epoch)
        report["pretraining"] = pretraining
        if clauses:
            report["clauses"] = translation_report(clause_translations, clause_references, clause_sources,
                                                   e.bootstrap_samples, e.seed)
        if lab_sources:
            report["lab"] = lab_report(lab_translations, lab_sources, lab_references)
        headline = translation_headline(report, pretraining)
        write_json(paths.EVALUATE_REPORT, report)
        write_json(paths.HEADLINE, headline)
        write_translations(TRANSLATIONS, list(pairs["source"]), list(pairs["target"]), translations)
        write_translations(CLAUSE_TRANSLATIONS, clause_sources, clause_references, clause_translations)
        write_translations(LAB_TRANSLATIONS, lab_sources, lab_references, lab_translations)  # even with none
        log_run(metrics={**{f"gap_{k}": v for k, v in report["gap"].items()},
                         **{f"{v}_{k}": report[v][k] for v in VARIANTS for k in ("bleu_mean", "chrf_mean")}})
        log_file(report, "evaluate.json")
        log_file(TRANSLATIONS, "")
        log_file(CLAUSE_TRANSLATIONS, "")
        log_to_pipeline(headline)
    print("\n".join(f"evaluate: {line}" for line in report_lines(report)))
