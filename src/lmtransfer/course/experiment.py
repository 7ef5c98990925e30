"""What the course's files decide: the course's own language model when present (loaded, one pretraining run, three
fine-tuning seeds), else one pretrained here (three runs) on the course's pretraining text, else on the pinned French
Bibles; passed as `dvc exp run -S` changes after profiles/course.yaml's."""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from lmtransfer.core.errors import LmtransferError
from lmtransfer.course.files import LANGUAGE_MODEL, PRETRAINING_TEXT

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
