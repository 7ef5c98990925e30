"""The translation recipe search (benchmarks/recipe_search.py for translation/params.yaml), run from translation/
after `dvc repro translation/dvc.yaml:tokenize`. Each fine-tune keeps its validation loss and greedy BLEU per
epoch, then its best epoch translates every validation verse (greedy): BLEU, chrF, and the share of outputs that
repeat a word three times in a row. `--table NAME` writes the docs' tables from `--out`.

    cd translation && python ../benchmarks/translation_recipe_search.py --name uniform --set model.embedding_init=uniform
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import recipe_search

from lmtransfer.core.paths import PREPARED, TOKENIZED
from lmtransfer.modeling.checkpoint import model_config_of
from lmtransfer.modeling.model import ModelConfig
from lmtransfer.tokens.id_files import load_pair_split, read_tokenized_meta
from lmtransfer.tokens.tokenizer import load_tokenizer
from lmtransfer.training.finetune_start import draw_seed
from lmtransfer.training.loop import RunOptions
from lmtransfer.translation.config import parse_translation_params
from lmtransfer.translation.evaluate import corpus_scores, repeated_share
from lmtransfer.translation.prepare_stage import read_pairs
from lmtransfer.translation.training import TranslationPairs, build_translation_model, finetune_translation
from lmtransfer.translation.translator import DecodingOptions, translate_sources

from results_file import Column, write_result

DEFAULT_OUT = Path(__file__).parent / "results" / "translation_recipe_search.json"


def score_split(model, split, references: list[str], tokenizer, device, batch_size: int) -> dict:
    """Greedy translations of a whole split: BLEU, chrF, the share with a token repeated 3+ times in a row."""
    sources = [split.source(i) for i in range(len(split))]
    hypotheses = translate_sources(model, sources, tokenizer, DecodingOptions(beam_size=1, batch_size=batch_size),
                                   device)
    scores = corpus_scores(hypotheses, references)
    return {"bleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2),
            "repeats": round(repeated_share(hypotheses), 4)}


def run_finetune(params, meta: dict, lm_state: dict | None, lm_config: ModelConfig, pretrain_seed: int, seed: int,
                 test: bool) -> dict:
    """One fine-tune as `finetune_<variant>@<p>-<f>` runs it; its curve and its best epoch's validation scores."""
    tokenizer = load_tokenizer(TOKENIZED)
    train, valid = load_pair_split(TOKENIZED, "train"), load_pair_split(TOKENIZED, "valid")
    valid_references = list(read_pairs(PREPARED, "valid")["target"])
    draws = draw_seed(seed, pretrain_seed)
    device = recipe_search.start(params, draws)
    model, _ = build_translation_model(lm_config, params.finetune, draws, lm_state)
    result = finetune_translation(model, TranslationPairs(train, valid, valid_references, tokenizer), params.finetune,
                                  RunOptions(device, draws))
    model.load_state_dict(result.best_state)
    run = {"val_loss": [round(row["val_loss"], 4) for row in result.history],
           "val_bleu": [round(row["val_bleu"], 2) for row in result.history],
           "seconds": round(result.seconds, 1), "best_epoch": result.best_epoch,
           "valid": score_split(model, valid, valid_references, tokenizer, device, params.evaluate.batch_size)}
    if test:
        split = load_pair_split(TOKENIZED, "test")
        run["test"] = score_split(model, split, list(read_pairs(PREPARED, "test")["target"]), tokenizer, device,
                                  params.evaluate.batch_size)
    return run


def mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 3)


def summarize(runs: list[dict], variants: list[str]) -> dict:
    """Means over the pretraining runs, per variant: the whole-validation scores, the loss per epoch."""
    summary: dict = {}
    for variant in variants:
        for split in ("valid", "test"):
            if split in runs[0][variant]:
                for key in ("bleu", "chrf", "repeats"):
                    summary[f"{variant}_{split}_{key}"] = mean([run[variant][split][key] for run in runs])
        for curve_name in ("val_loss", "val_bleu"):
            curves = [run[variant][curve_name] for run in runs]
            summary[f"{variant}_{curve_name}"] = [mean([curve[e] for curve in curves]) for e in range(len(curves[0]))]
        summary[f"{variant}_seconds"] = mean([run[variant]["seconds"] for run in runs])
    if "pretrained" in variants:
        summary["val_perplexity"] = mean([run["val_perplexity"] for run in runs])
        summary["pretrain_seconds"] = mean([run["pretrain_seconds"] for run in runs])
    return summary


def run_candidate(args: argparse.Namespace) -> dict:
    params = recipe_search.candidate_params(args.changes, parse_translation_params)
    meta = read_tokenized_meta(TOKENIZED)
    scratch_config = ModelConfig.from_params(params.model, meta["vocab_size"], meta["pad_id"], params.causal_attention)
    runs = []
    for pretrain_seed in args.pretrain_seeds:
        run: dict = {"pretrain_seed": pretrain_seed}
        for variant in args.variants:
            lm_state, lm_config = None, scratch_config
            if variant == "pretrained":
                model, objective, perplexity, seconds = recipe_search.run_pretraining(params, meta, pretrain_seed)
                payload = recipe_search.pretrained_payload(model, objective)
                lm_state, lm_config = payload["state_dict"], model_config_of(payload)
                run.update(val_perplexity=round(perplexity, 2), pretrain_seconds=round(seconds, 1))
            run[variant] = run_finetune(params, meta, lm_state, lm_config, pretrain_seed, args.finetune_seed, args.test)
        print(json.dumps(run), flush=True)
        runs.append(run)
    return {"summary": summarize(runs, args.variants), "runs": runs}


TABLE_COLUMNS = [
    Column("candidate"), Column("changes to translation/params.yaml (--set ...)"),
    Column("pretrained BLEU", ".2f"), Column("pretrained chrF", ".1f"), Column("scratch BLEU", ".2f"),
    Column("scratch chrF", ".1f"), Column("gap, BLEU", "+.2f"), Column("repeats, pretrained", ".1%"),
    Column("validation loss per epoch, pretrained", ""), Column("LM perplexity", ".1f"),
    Column("pretraining run, s", ".0f"), Column("fine-tune, s", ".0f"),
]


def table_row(name: str, row: dict) -> list:
    """One candidate as the docs show it: greedy scores of every validation verse, mean of the pretraining runs."""
    s = row["summary"]
    changes = " ".join(row["changes"]) or f"none (translation/params.yaml at {row['commit']})"
    gap = s["pretrained_valid_bleu"] - s["scratch_valid_bleu"] if "scratch_valid_bleu" in s else None
    losses = " / ".join(f"{v:.2f}" for v in s.get("pretrained_val_loss", []))
    return [name, changes, s.get("pretrained_valid_bleu"), s.get("pretrained_valid_chrf"), s.get("scratch_valid_bleu"),
            s.get("scratch_valid_chrf"), gap, s.get("pretrained_valid_repeats"), losses, s.get("val_perplexity"),
            s.get("pretrain_seconds"), s.get("pretrained_seconds")]


def training_seconds(runs: list[dict]) -> float:
    """What the runs took: each pretraining, and each of its fine-tunes."""
    return sum(run.get("pretrain_seconds", 0) + sum(run[v]["seconds"] for v in ("pretrained", "scratch") if v in run)
               for run in runs)


def write_table(runs_file: Path, name: str, notes: str) -> None:
    table = json.loads(runs_file.read_text())
    rows = [table_row(candidate, row) for candidate, row in table.items()]
    seconds = sum(training_seconds(row["runs"]) for row in table.values())
    first = next(iter(table.values()))
    write_result(name, TABLE_COLUMNS, rows, seconds=seconds, notes=notes, machine_facts=first["machine"],
                 code=first["commit"], command=first["command"].split(" --name")[0] + " --name NAME --set ...")


def main() -> None:
    parser = recipe_search.candidate_parser(__doc__.splitlines()[0], "translation/params.yaml", DEFAULT_OUT,
                                            "also the test verses: a profile's one report")
    recipe_search.search(parser, run_candidate, write_table, "../benchmarks/translation_recipe_search.py", wall=True)


if __name__ == "__main__":
    main()
