"""Faults a hostile-but-realistic user meets, tried on a tiny copy of the pipeline, each sorted by what came of it.

    python benchmarks/fault_battery.py   # a tiny pipeline in a temporary folder, then every case (5-10 min)

benchmarks/results/fault_battery.json keeps each case's outcome and the last line it printed; the table of
docs/guide/errors.md is generated from it.

Every case changes one thing (a parameter, a data file, an environment variable, the MLflow store, a reference
file, a command's argument), runs what a user would run, then puts things back. Its outcome is one of:

- ok: the run stopped in a few lines with the words the case expects (the key, the file, the variable), or a
  case that should run did;
- traceback: a Python traceback or DVC's "unexpected error" reached the user;
- silent: a value that should be refused ran as if it were fine;
- misleading: it stopped, but without naming what to fix;
- lost: an output that existed before (data, models, metrics, plots) changed or went missing.

The tiny pipeline is that of the end-to-end tests (tests/pipeline_repo.py): 180 labeled lines, a 400-line
corpus, one layer of width 16. Nothing here is a test: the tests hold one case each; this runs them together, as
an outside check would, and prints the counts.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the end-to-end tests' tiny pipeline

from pipeline_repo import STORE_FAULTS, TINY_PARAMS, ChattrMissing, break_store, make_repo, run, write_tiny_data  # noqa: E402
from results_file import Column, write_result  # noqa: E402

OUTPUTS = ["data/inputs", "data/prepared", "data/prepared_corpus", "data/tokenized", "data/tokenized_corpus",
           "models", "metrics", "plots"]
LMTRANSFER = [sys.executable, "-m", "lmtransfer.cli"]


@dataclass
class Case:
    """One fault: what it changes (`apply`, which returns what undoes it), what the user runs, and what the
    answer must say (`expect`: every word; empty for a case that must run)."""

    group: str
    name: str
    command: list[str]
    expect: tuple[str, ...]
    apply: Callable[[Path], Callable[[], None]] = lambda root: (lambda: None)
    env: dict[str, str] = field(default_factory=dict)


def fingerprint(root: Path) -> dict[str, str]:
    """md5 of every output file: what a fault must not take away."""
    return {p.relative_to(root).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
            for out in OUTPUTS for p in sorted((root / out).rglob("*")) if p.is_file()}


def edit_params(old: str, new: str, params: str = "params.yaml") -> Callable[[Path], Callable[[], None]]:
    """A params.yaml whose one line `old` reads `new` (a regular expression on the file's text)."""
    def apply(root: Path) -> Callable[[], None]:
        path = root / params
        original = path.read_text()
        changed, count = re.subn(old, new, original, count=1, flags=re.MULTILINE)
        if count != 1:
            raise SystemExit(f"fault_battery: {old!r} not found in {params}")
        path.write_text(changed)
        return lambda: path.write_text(original)
    return apply


def built_in_data(root: Path) -> Callable[[], None]:
    """params.yaml asking for the built-in reviews (`data.source: movies-en`, the file keys emptied)."""
    undos = [edit_params(old, new)(root) for old, new in (
        (r"source: files", "source: movies-en"), (r"train: raw/labeled\.tsv", "train: ''"),
        (r"corpus:( +#[^\n]*)?\n(\s*\n)*  - raw/corpus\*\.txt\n", "corpus: []\n"))]
    return undos[0]  # the first undo writes back the file as it was before all three


def data_file(content: bytes, name: str = "raw/bad.tsv") -> Callable[[Path], Callable[[], None]]:
    """`data.train` pointing at a file holding `content`."""
    def apply(root: Path) -> Callable[[], None]:
        (root / name).write_bytes(content)
        undo_params = edit_params(r"train: raw/labeled\.tsv", f"train: {name}")(root)

        def undo() -> None:
            undo_params()
            (root / name).unlink(missing_ok=True)
        return undo
    return apply


def broken_store(fault: str) -> Callable[[Path], Callable[[], None]]:
    """The MLflow store damaged as `fault` says (tests/pipeline_repo.py), and a parameter changed that reruns
    evaluate."""
    def apply(root: Path) -> Callable[[], None]:
        undo_store = break_store(root, fault)
        undo_params = edit_params(r"bootstrap_samples: \d+", "bootstrap_samples: 170")(root)

        def undo() -> None:
            undo_params()
            undo_store()
        return undo
    return apply


REFERENCE = "results/reference/AuthenticAMD.json"  # another vendor's: read beside this machine's by --reference


def reference_file(content: bytes) -> Callable[[Path], Callable[[], None]]:
    """A committed vendor reference (`lmtransfer results --reference` reads every one) holding `content`."""
    def apply(root: Path) -> Callable[[], None]:
        path = root / REFERENCE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return lambda: path.unlink()
    return apply


REPRO = ["dvc", "repro"]
PRETRAIN_SEEDS = r"seeds: +# one pretraining run[^\n]*\n\s*  - 0\n  - 1\n"
FINETUNE_SEEDS = r"seeds: +# fine-tunes per[^\n]*\n  - 0\n"


def cases() -> list[Case]:
    """The battery. Values differ from those the tests use, so that it checks the rules, not the examples."""
    params = [
        ("d_model negative", r"d_model: 16", "d_model: -16", ("model.d_model",)),
        ("heads do not divide the width", r"n_heads: 2", "n_heads: 5", ("model.n_heads", "model.d_model")),
        ("learning rate a word", r"^  lr: 0\.001", "  lr: fast", ("finetune.lr",)),
        ("unknown key", r"^  n_layers: 1", "  n_layers: 1\n  layers: 3", ("model.layers",)),
        ("no pretraining seeds", PRETRAIN_SEEDS, "seeds: []\n", ("pretrain.seeds",)),
        ("pretraining seeds a number", PRETRAIN_SEEDS, "seeds: 3\n", ("params.yaml", "pretrain.seeds")),
        ("fine-tuning seeds a number", FINETUNE_SEEDS, "seeds: 2.5\n", ("params.yaml", "finetune.seeds")),
        ("fine-tuning seeds a word", FINETUNE_SEEDS, "seeds: abc\n", ("finetune.seeds",)),
        ("pretraining seeds left empty", PRETRAIN_SEEDS, "seeds:\n", ("params.yaml", "pretrain.seeds")),
        ("vocabulary of zero", r"vocab_size: 60", "vocab_size: 0", ("tokenizer.vocab_size",)),
        ("negative bootstrap", r"bootstrap_samples: \d+", "bootstrap_samples: -5", ("evaluate.bootstrap_samples",)),
        ("zero processes", r"^  nproc: \d+", "  nproc: 0", ("train.nproc",)),
        ("dropout above one", r"^  dropout: 0\.1", "  dropout: 1.5", ("model.dropout",)),
        ("a list where a number goes", r"max_steps: 12", "max_steps: [12]", ("pretrain.max_steps",)),
    ]
    battery = [Case("params", name, REPRO, expect, edit_params(old, new)) for name, old, new, expect in params]
    battery.append(Case("params", "pretraining seeds a number, checked first", [*LMTRANSFER, "params", "--check",
                        "params.yaml"], ("params.yaml", "pretrain.seeds"),
                        edit_params(PRETRAIN_SEEDS, "seeds: 3\n")))
    data = [
        ("no such file", None, ("raw/absent.tsv",)),
        ("empty file", b"", ("raw/bad.tsv",)),
        ("header only", b"text\tlabel\n", ("raw/bad.tsv",)),
        ("no label column", b"text\tstars\nfine film\t5\nbad film\t1\n", ("raw/bad.tsv", "data.label_column")),
        ("latin-1 bytes", b"text\tlabel\nfine film\tpos\nna\xefve film\tneg\n", ("raw/bad.tsv", "line 3")),
        ("one class", b"text\tlabel\n" + b"".join(b"film %d\tpos\n" % i for i in range(50)), ("single class",)),
        ("text of spaces", b"text\tlabel\nfine film\tpos\n \t neg\nbad film\tneg\n", ("raw/bad.tsv", "line 3")),
    ]
    for name, content, expect in data:
        apply = (edit_params(r"train: raw/labeled\.tsv", "train: raw/absent.tsv") if content is None
                 else data_file(content))
        battery.append(Case("data files", name, REPRO, expect, apply))
    knobs = [
        ("LMTRANSFER_JOBS", "1.5"), ("LMTRANSFER_JOBS", "two"), ("LMTRANSFER_WATCH", "sometimes"),
        ("LMTRANSFER_CPU_KERNELS", "avx512"), ("LMTRANSFER_DEBUG", "verbose"),
        ("LMTRANSFER_HANDOVER", '{"wait": "spin"}'), ("LMTRANSFER_HANDOVER", "[1, 2]"),
        ("LMTRANSFER_OPENMP_WAIT", "nonsense"),
    ]
    for variable, value in knobs:
        for command in ([*LMTRANSFER, "results"], ["dvc", "repro", "validate"]):
            battery.append(Case("environment", f"{variable}={value} ({command[-1]})", command, (variable,),
                                env={variable: value}))
    for name, target in (("cache a file", "file"), ("cache unwritable", "immutable")):
        battery.append(Case("environment", f"LMTRANSFER_CACHE_DIR: {name}", REPRO, ("LMTRANSFER_CACHE_DIR",),
                            _cache_fault(target), env={"LMTRANSFER_CACHE_DIR": "cache-dir"}))
    for fault in STORE_FAULTS:  # an empty file is an empty SQLite database: no run in it to lose, so it is built
        battery.append(Case("store", fault, REPRO, () if fault == "empty file" else ("mlflow.db",),
                            broken_store(fault)))
    references = [("empty list", b"[]"), ("headline a number", b'{"headline": 3}'), ("headline empty",
                  b'{"headline": {}}'), ("cut short", b'{"head'), ("binary", bytes(range(256)))]
    for name, content in references:
        battery.append(Case("reference files", name, [*LMTRANSFER, "results", "--reference"], ("AuthenticAMD.json",),
                            reference_file(content)))
    battery += [
        Case("command line", "scaling spread file missing",
             [*LMTRANSFER, "scaling", "--pretraining-spread", "spread-absent.json"], ("spread-absent.json",)),
        Case("command line", "compare by an unknown param", [*LMTRANSFER, "compare", "--by", "model.widthh"],
             ("model.widthh",)),
        Case("command line", "predict with no text", [*LMTRANSFER, "predict"], ("text",)),
        Case("command line", "generate a negative length", [*LMTRANSFER, "generate", "the film", "--tokens", "-3"],
             ("--tokens",)),
        Case("command line", "summary of an odd shape", [*LMTRANSFER, "summary", "--d-model", "10", "--n-heads",
                                                         "3"], ("n_heads",)),
        Case("command line", "translate without the translation pipeline", [*LMTRANSFER, "translate", "hello"],
             ("translation",)),
        Case("runs", "an unchanged pipeline", REPRO, ()),
    ]
    return battery


def _cache_fault(kind: str) -> Callable[[Path], Callable[[], None]]:
    """The built-in dataset asked for, with its cache folder a file, or a folder that cannot be written."""
    def apply(root: Path) -> Callable[[], None]:
        cache = root / "cache-dir"
        if kind == "file":
            cache.write_text("not a folder")
        else:
            cache.mkdir()
            if subprocess.run(["chattr", "+i", str(cache)], capture_output=True).returncode:
                cache.rmdir()
                raise ChattrMissing("an unwritable cache")
        undo_params = built_in_data(root)

        def undo() -> None:
            undo_params()
            if kind != "file":
                subprocess.run(["chattr", "-i", str(cache)], check=True)
                cache.rmdir()
            else:
                cache.unlink()
        return undo
    return apply


def telling_line(output: str, root: Path) -> str:
    """The line a user reads first: ours that says `error` (not DVC's summary after it), else the last; the
    temporary folder's path written as `.`."""
    lines = [line.strip() for line in output.replace(str(root), ".").splitlines() if line.strip()]
    ours = [index for index, line in enumerate(lines)
            if "error" in line.lower() and not line.startswith("ERROR: failed to reproduce")]
    if not ours:
        return lines[-1][:240] if lines else ""
    said = lines[ours[0]]
    if said.endswith(":") and ours[0] + 1 < len(lines):  # "params.yaml: invalid parameters:", then the key
        said += " " + lines[ours[0] + 1]
    return said[:240]


def outcome(case: Case, result: subprocess.CompletedProcess, lost: list[str]) -> str:
    output = result.stdout + result.stderr
    if lost and result.returncode != 0:  # a run that stopped must leave every output as it was
        return "lost"
    if "Traceback (most recent call last)" in output or "unexpected error" in output:
        return "traceback"
    if not case.expect:
        return "ok" if result.returncode == 0 else "misleading"
    if result.returncode == 0:
        return "silent"
    return "ok" if all(word in output for word in case.expect) else "misleading"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the tiny pipeline's folder")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fault-battery-"))
    root = folder / "pipeline"
    root.mkdir()
    started = time.time()
    env = make_repo(root, TINY_PARAMS, write_tiny_data)
    print(f"fault battery: the tiny pipeline's first run in {root} ...", flush=True)
    run(["dvc", "repro"], root, env)
    print(f"  done in {time.time() - started:.0f} s", flush=True)
    rows, counts = [], {}
    for case in cases():
        before = fingerprint(root)
        try:
            undo = case.apply(root)
        except ChattrMissing:
            print(f"{'skipped':10s} {case.group:16s} {case.name:44s} chattr +i is not available here", flush=True)
            continue
        try:
            result = subprocess.run(case.command, cwd=root, env={**env, **case.env}, capture_output=True,
                                    text=True, timeout=900)
        finally:
            undo()
        after = fingerprint(root)
        lost = sorted(name for name, digest in before.items() if after.get(name) != digest)
        verdict = outcome(case, result, lost)
        counts[verdict] = counts.get(verdict, 0) + 1
        last = telling_line(result.stdout + result.stderr, root)
        print(f"{verdict:10s} {case.group:16s} {case.name:44s} {last}", flush=True)
        shown = " ".join(["lmtransfer", *case.command[3:]] if case.command[0] == sys.executable else case.command)
        rows.append([case.group, case.name, " ".join([*(f"{k}={v}" for k, v in case.env.items()), shown]),
                     verdict, result.returncode, last])
        if lost or "dvc" in case.command[0]:
            subprocess.run(["dvc", "repro"], cwd=root, env=env, capture_output=True, text=True)  # back to clean
    tally = {name: counts.get(name, 0) for name in ("ok", "lost", "traceback", "silent", "misleading")}
    summary = f"{len(rows)} cases: " + ", ".join(f"{count} {name}" for name, count in tally.items())
    print(f"\n{summary} ({time.time() - started:.0f} s)")
    columns = [Column("group"), Column("case"), Column("what ran"), Column("outcome"), Column("exit"),
               Column("what it said")]
    write_result("fault_battery", columns, rows, seconds=time.time() - started, notes=summary + " (the tiny pipeline of the end-to-end tests)")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
