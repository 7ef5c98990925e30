"""`lmtransfer course`: what the course's files decide (the course's own language model when present: loaded, one
pretraining run, three fine-tuning seeds; else one pretrained here, three runs, on the course's pretraining text, else
on the pinned French Bibles), passed as `dvc exp run -S` changes after profiles/course.yaml's; the lab's table."""

from __future__ import annotations

import shlex
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from lmtransfer.core.errors import LmtransferError
from lmtransfer.core.io import write_text
from lmtransfer.course.files import LANGUAGE_MODEL, PRETRAINING_TEXT
from lmtransfer.translation.data.bible_en_fr import FRENCH, fetch_bible_database, read_bible

RAW = Path("data") / "course"  # the course's files, from the repository root (where profiles/course.yaml names them)

# 2-core Intel Xeon @ 2.50GHz, through this pipeline alone (results/course/, docs/results/course-lab.md): tokens
# per second of pretraining at V = 50,001 (the LM head dominates; measured in the adaptation phase), and of a
# fine-tuning epoch at the course's shape, its validation included (finetune_pretrained@1-0: 8 epochs in 350 s).
PRETRAIN_TOKENS_PER_S = 1_600
FINETUNE_TOKENS_PER_S = 4_800


@dataclass
class Plan:
    changes: list[str] = field(default_factory=list)
    pretrained: str = ""
    write_bible: bool = False


def plan_for(present: dict[str, Path], extra: list[str]) -> Plan:
    """The changes the files present call for, then the user's own `--set`s (which win)."""
    if LANGUAGE_MODEL in present:
        plan = Plan([f"pretrain.init_from={RAW / LANGUAGE_MODEL}", "pretrain.seeds=[0]", "pretrain.adapt_epochs=0",
                     "finetune.seeds=[0,1,2]", "data.corpus=[]"],
                    f"the course's language model ({LANGUAGE_MODEL}), loaded: one pretraining run, its fine-tunes "
                    "with seeds 0, 1, 2 against as many scratch runs")
    elif PRETRAINING_TEXT in present:
        plan = Plan([f"data.corpus=[{RAW / PRETRAINING_TEXT}]", f"data.corpus_format={text_format(present[PRETRAINING_TEXT])}"],
                    f"a language model pretrained here on the course's {PRETRAINING_TEXT}, 3 runs")
    else:
        plan = Plan([], "a language model pretrained here on three French Bibles (the pinned bible-fr.txt), "
                        "3 runs: the course's language model and its pretraining text are not among the files",
                    write_bible=True)
    plan.changes += extra
    return plan


def text_format(path: Path) -> str:
    """`pieces` when the text is already cut by sentencepiece (▁ opens most tokens), else `text`."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        sample = handle.read(1 << 16).split()
    marked = sum(token.startswith("▁") for token in sample)
    return "pieces" if sample and marked > len(sample) / 3 else "text"


def estimate_minutes(params, train_tokens: int) -> float:
    pretrain, finetune = params.pretrain, params.finetune
    pretraining = 0 if params.pretrain.init_from else len(pretrain.seeds) * (
        pretrain.max_steps * pretrain.batch_size * pretrain.seq_len + pretrain.adapt_epochs * train_tokens)
    runs = 2 * len(pretrain.seeds) * len(finetune.seeds)
    return (pretraining / PRETRAIN_TOKENS_PER_S + runs * finetune.epochs * train_tokens / FINETUNE_TOKENS_PER_S) / 60


def run_pipeline(command: list[str], root: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    print("course: " + shlex.join(command), flush=True)
    if subprocess.run(command, cwd=root, env=env).returncode:
        raise LmtransferError(f"`{' '.join(command)}` failed (its error is above); the files in "
                              f"{RAW} stay checked: rerun `lmtransfer course` once it is mended")
    return time.perf_counter() - start


# The French text to pretrain on when the course's LM and its text are absent: far from the reviews' register,
# which is why the recipe adapts the LM to the reviews' own text afterwards.
FRENCH_BIBLES = (FRENCH, "o", "5")  # Louis Segond 1910, Ostervald 1996, Darby, one chapter a line
CORPUS_NAME = "bible-fr.txt"


def french_bible_lines() -> list[str]:
    database = fetch_bible_database()
    lines = []
    for bible in FRENCH_BIBLES:
        chapters: dict[tuple[int, int], list[tuple[int, str]]] = defaultdict(list)
        for (book, chapter, verse), text in read_bible(database, bible).items():
            if text:
                chapters[(book, chapter)].append((verse, text))
        lines += [" ".join(text for _, text in sorted(verses)) for _, verses in sorted(chapters.items())]
    return lines


def write_french_corpus(folder: Path) -> Path:
    """`folder/bible-fr.txt`, written once (atomically) from the pinned database."""
    target = folder / CORPUS_NAME
    if not target.is_file():
        print(f"course: writing the French pretraining text {target} from the pinned Bible database", flush=True)
        write_text(target, "\n".join(french_bible_lines()) + "\n")
    return target


# What the course's material reports for lab 2 (CLS books, its 4-layer model): test accuracy from scratch about
# 78%, pretrained 80-83%; students' write-ups show validation accuracy after the first epoch of about 75%
# pretrained against 50% from scratch, both near 83% by the end.
PUBLISHED = {
    "scratch_test": "about 0.78",
    "pretrained_test": "0.80 to 0.83",
    "first_epoch": "about 0.75 pretrained against 0.50 from scratch",
    "last_epoch": "both about 0.83",
}


def _cell(mean: float, sd: float) -> str:
    return f"{mean:.3f} ± {sd:.3f}"


def lab_lines(report: dict) -> list[str]:
    pretrained, scratch, gap = report["pretrained"], report["scratch"], report["gap"]
    runs = report["n_seeds"]
    lines = [f"The course's experiment on its files: {report['n_test_examples']:,} test reviews, "
             f"{runs} runs per variant ({report['n_pretraining_runs']} pretraining run(s) x "
             f"{report['n_finetuning_seeds']} fine-tuning seed(s))", "",
             "validation accuracy per epoch (mean ± sd over the runs):",
             f"  {'epoch':>5}  {'pretrained':>15}  {'scratch':>15}  {'difference':>10}"]
    curves = zip(*(variant[f"val_accuracy_{kind}_per_epoch"] for variant in (pretrained, scratch)
                   for kind in ("mean", "std")))
    lines += [f"  {epoch:>5}  {_cell(p, p_sd):>15}  {_cell(s, s_sd):>15}  {p - s:>+10.3f}"
              for epoch, (p, p_sd, s, s_sd) in enumerate(curves, start=1)]
    lines += ["", "test accuracy (each run at its best validation epoch):",
              f"  pretrained  {_cell(pretrained['accuracy_mean'], pretrained['accuracy_std'])}   "
              f"course: {PUBLISHED['pretrained_test']}",
              f"  scratch     {_cell(scratch['accuracy_mean'], scratch['accuracy_std'])}   "
              f"course: {PUBLISHED['scratch_test']}",
              f"  gap         {gap['accuracy_mean']:+.4f}, 95% interval [{gap['ci95_low']:+.4f}, "
              f"{gap['ci95_high']:+.4f}], p = {gap['p_value']:.3g}",
              f"  TF-IDF + logistic regression on the same pieces: {report['baseline']['accuracy']:.4f}",
              f"  the course's write-ups, validation: epoch 1 {PUBLISHED['first_epoch']}; "
              f"last epoch {PUBLISHED['last_epoch']}"]
    return lines
