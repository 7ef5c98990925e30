"""Memory and speed of the corpus stages on a large generated corpus (default 1 GB).

Generates a deterministic corpus (Zipfian word frequencies over 40,000 made-up words, varied line lengths, about
3% of lines repeating an earlier one, some in other case or spacing, a few very long lines) and a small labeled
CSV, runs `dvc repro pretrain@0` on them in a throwaway copy of the pipeline (default data and tokenizer params,
a small model), and samples the resident memory of the process tree every 0.2 s. Per stage: DVC's wall time, the
stage's own time, the peak memory of the stage's processes and with DVC; then tokenize's encoding rate.

    python benchmarks/large_corpus.py                       # 1 GB in a temporary folder, removed after
    python benchmarks/large_corpus.py --size-mb 50          # a quick look
    python benchmarks/large_corpus.py --dir /tmp/big --keep # keep the repo (and reuse the corpus next time)

Needs free disk of about 5x the corpus size (the corpus, its prepared copy, DVC's cache of it, the ids).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

from results_file import Column, write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from pipeline_repo import make_repo  # noqa: E402 - the end-to-end tests' throwaway repo, reused

CORPUS_STAGES = ("validate", "prepare", "tokenize", "pretrain@0")
SAMPLE_SECONDS = 0.2
VOCABULARY = 40_000
ZIPF_EXPONENT = 1.05
REPEAT_SHARE = 0.03  # of lines: a copy of an earlier line (every third one in other case or spacing)
LONG_LINE_SHARE = 2e-5  # of lines: 30-60k characters, cut into documents by prepare
LINES_PER_CHUNK = 50_000
SYLLABLES = [c + v for c in ("", "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
                             "ch", "sh", "th", "st", "pr", "tr")
             for v in ("a", "e", "i", "o", "u", "ai", "ea", "ou")]
POSITIVE = ["wonderful", "great", "superb", "delightful", "moving", "brilliant", "charming", "excellent"]
NEGATIVE = ["awful", "boring", "dreadful", "tedious", "clumsy", "dull", "terrible", "pointless"]


def make_vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """Distinct made-up words; frequent ranks get short words, as in natural language."""
    words, seen = [], set()
    while len(words) < size:
        rank = len(words)
        syllables = 1 + min(3, int(rng.exponential(0.4 + rank / 8000)))
        word = "".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), syllables))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def zipf_cdf(size: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, size + 1) ** exponent
    return np.cumsum(weights) / weights.sum()


def sentences(rng: np.random.Generator, words: np.ndarray, cdf: np.ndarray, n_lines: int) -> list[str]:
    """`n_lines` lines of Zipfian words, 1 to ~400 words each (log-normal, median ~18)."""
    lengths = np.clip(rng.lognormal(2.9, 0.8, n_lines).astype(np.int64), 1, 400)
    long_lines = rng.random(n_lines) < LONG_LINE_SHARE
    lengths[long_lines] = rng.integers(5_000, 10_000, int(long_lines.sum()))
    drawn = words[np.searchsorted(cdf, rng.random(int(lengths.sum())))].tolist()
    ends = np.cumsum(lengths).tolist()
    marks = rng.choice([".", ".", ".", "!", "?", ""], n_lines).tolist()
    lines, begin = [], 0
    for end, mark in zip(ends, marks):
        line = " ".join(drawn[begin:end])
        lines.append(line[0].upper() + line[1:] + mark)
        begin = end
    return lines


def write_corpus(path: Path, size_bytes: int, seed: int = 0) -> int:
    """A corpus of at least `size_bytes` UTF-8 bytes, the same for the same size and seed; returns its lines."""
    rng = np.random.default_rng(seed)
    words = np.array(make_vocabulary(rng, VOCABULARY), dtype=object)
    cdf = zipf_cdf(VOCABULARY, ZIPF_EXPONENT)
    recent: list[str] = []
    written = n_lines = 0
    started = time.perf_counter()
    with open(path, "w", encoding="utf-8") as handle:
        while written < size_bytes:
            lines = sentences(rng, words, cdf, LINES_PER_CHUNK)
            repeats = np.flatnonzero(rng.random(len(lines)) < REPEAT_SHARE)
            for number, index in enumerate(repeats.tolist()):
                if not recent:
                    break
                copy = recent[int(rng.integers(len(recent)))]
                if number % 3 == 1:
                    copy = copy.upper()
                elif number % 3 == 2:
                    copy = "  " + copy.replace(" ", "  ") + " "
                lines[index] = copy
            recent = (recent + lines[-2000:])[-20_000:]
            text = "\n".join(lines) + "\n"
            handle.write(text)
            before, written = written, written + len(text.encode("utf-8"))
            n_lines += len(lines)
            if written // (64 << 20) > before // (64 << 20) or written >= size_bytes:
                print(f"  corpus: {written / 2**20:,.0f} / {size_bytes / 2**20:,.0f} MB, {n_lines:,} lines "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)
    return n_lines


def write_labeled(path: Path, n_rows: int = 3000, seed: int = 1) -> None:
    """A small sentiment-like CSV: Zipfian filler words with a few words that carry the label."""
    rng = np.random.default_rng(seed)
    words = np.array(make_vocabulary(rng, 5000), dtype=object)
    cdf = zipf_cdf(len(words), ZIPF_EXPONENT)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for text in sentences(rng, words, cdf, n_rows):
            label = "pos" if rng.random() < 0.5 else "neg"
            cue = rng.choice(POSITIVE if label == "pos" else NEGATIVE)
            writer.writerow([f"{text[:300]} {cue}", label])


def ensure_data(folder: Path, size_mb: float) -> tuple[Path, Path]:
    """The corpus and the labeled file in `folder`; a corpus made earlier for the same size is reused."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus, labeled, stamp = folder / "corpus.txt", folder / "train.csv", folder / "corpus.json"
    wanted = json.dumps({"size_mb": size_mb, "seed": 0, "vocabulary": VOCABULARY})
    if not (corpus.is_file() and stamp.is_file() and stamp.read_text() == wanted):
        print(f"generating a {size_mb:,g} MB corpus in {corpus}")
        stamp.unlink(missing_ok=True)  # written once the corpus is whole
        write_corpus(corpus, int(size_mb * 2**20))
        stamp.write_text(wanted)
    write_labeled(labeled)
    return corpus, labeled


def benchmark_params(corpus: Path, labeled: Path, threads: int) -> dict:
    """The defaults for data and tokenizer (what is measured); a small model and a short pretraining."""
    return {
        "data": {"source": "files", "train": str(labeled), "corpus": [str(corpus)]},
        "model": {"n_layers": 2, "d_model": 128, "n_heads": 2, "d_ff": 128},
        "pretrain": {"max_steps": 200, "eval_every": 100, "eval_batches": 10, "adapt_epochs": 0,
                     "generate_tokens": 10, "seeds": [0]},  # one pretraining run: pretrain@0
        "finetune": {"seeds": [0], "epochs": 1},
        "train": {"num_threads": threads, "resume_every": 0},
    }


class TreeSampler(threading.Thread):
    """Every SAMPLE_SECONDS: the peak resident memory of a process's descendants (`stage`) and with it (`tree`),
    charged to the stage running."""

    def __init__(self, root: psutil.Process):
        super().__init__(daemon=True)
        self.root, self.stage, self.done = root, None, threading.Event()
        self.peaks: dict[str, dict[str, int]] = {}

    def run(self) -> None:
        while not self.done.wait(SAMPLE_SECONDS):
            if self.stage is None:
                continue
            with contextlib.suppress(psutil.Error):
                own, below = self.root.memory_info().rss, 0
                for child in self.root.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        below += child.memory_info().rss
                peak = self.peaks.setdefault(self.stage, {"stage": 0, "tree": 0})
                peak["stage"], peak["tree"] = max(peak["stage"], below), max(peak["tree"], own + below)


def run_pipeline(repo: Path, env: dict[str, str], log: Path) -> tuple[dict, dict, dict]:
    """`dvc repro pretrain@0`, echoing DVC's lines; returns per stage: wall seconds, own seconds, peak RSS."""
    process = subprocess.Popen(["dvc", "repro", "pretrain@0"], cwd=repo, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, bufsize=1)
    sampler = TreeSampler(psutil.Process(process.pid))
    sampler.start()
    walls, own, begun, stage = {}, {}, time.perf_counter(), None
    with open(log, "w") as saved:
        for line in process.stdout:
            saved.write(line)
            started = re.match(r"Running stage '([^']+)'", line)
            finished = re.match(r"([\w@-]+): done in ([\d.]+) s", line)
            if started:
                now = time.perf_counter()
                if stage:
                    walls[stage] = now - begun
                stage, begun = started.group(1), now
                sampler.stage = stage
            if finished:
                own[finished.group(1)] = float(finished.group(2))
            print(f"  | {line.rstrip()}", flush=True)
    code = process.wait()
    if stage:
        walls[stage] = time.perf_counter() - begun
    sampler.done.set()
    sampler.join()
    if code:
        raise SystemExit(f"dvc repro failed (exit {code}); see {log}")
    return walls, own, sampler.peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=1024, help="corpus size in MiB (default 1024)")
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (corpus, repo, outputs)")
    parser.add_argument("--threads", type=int, default=0, help="train.num_threads of the pretraining (0 = all)")
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="lmtransfer-large-corpus-"))
    started = time.perf_counter()
    try:
        corpus, labeled = ensure_data(folder / "data", args.size_mb)
        repo = folder / "repo"
        if repo.exists():
            shutil.rmtree(repo)
        repo.mkdir(parents=True)
        env = make_repo(repo, benchmark_params(corpus, labeled, args.threads), lambda root: None)
        print(f"pipeline copy in {repo}; running dvc repro pretrain@0")
        walls, own, peaks = run_pipeline(repo, env, folder / "dvc_repro.log")
        report(repo, corpus, walls, own, peaks, time.perf_counter() - started)
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def report(repo: Path, corpus: Path, walls: dict, own: dict, peaks: dict, total: float) -> None:
    mb = 2**20
    rows = [[stage, walls.get(stage), own.get(stage), round(peaks.get(stage, {}).get("stage", 0) / mb),
             round(peaks.get(stage, {}).get("tree", 0) / mb)] for stage in CORPUS_STAGES]
    notes = f"a {corpus.stat().st_size / mb:,.0f} MB generated corpus; total {total:,.0f} s (generation included)"
    timings_path = repo / "timings" / "tokenize.json"
    if timings_path.is_file():
        timings = json.loads(timings_path.read_text())
        notes += (f"; tokenize encoded {timings['corpus_tokens']:,} tokens at "
                  f"{timings['corpus_bytes'] / mb / timings['encode_seconds']:.1f} MB/s, "
                  f"{timings['corpus_tokens'] / timings['encode_seconds']:,.0f} tokens/s")
    print(f"\n{notes}; {psutil.cpu_count()} cores\nstage, wall s, own s, peak RSS stage MB, peak RSS with dvc MB")
    for row in rows:
        print(", ".join(str(cell) for cell in row))
    write_result("large_corpus", [Column("stage"), Column("wall s", ".1f"), Column("own s", ".1f"),
                                  Column("peak RSS, stage MB", ",.0f"), Column("peak RSS with dvc MB", ",.0f")],
                 rows, seconds=total, notes=notes)


if __name__ == "__main__":
    main()
