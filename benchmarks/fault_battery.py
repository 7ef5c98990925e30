"""Faults a hostile-but-realistic user meets, tried on the end-to-end tests' tiny pipelines (tests/pipeline_repo.py),
each sorted by what came of it; benchmarks/results/fault_battery.json holds the table of docs/guide/errors.md.

    python benchmarks/fault_battery.py                                       # every case (15-20 min)
    python benchmarks/fault_battery.py --only translation --only init_from   # the cases named so

Every case changes one thing (a parameter, a data file, an environment variable, the MLflow store, a result file,
a command's argument), runs what a user would run, then puts things back. Outcomes: ok (stopped in a few lines
with the words the case expects, or a case that should run did); traceback (a Python traceback or DVC's
"unexpected error" reached the user); silent (a value that should be refused ran); misleading (stopped without
naming what to fix); lost (an output that existed before changed or went missing). The tests hold one case each;
this runs them together, with other values, as an outside check would.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the end-to-end tests' tiny pipeline
sys.path.insert(0, str(REPO / "tests" / "pipeline"))  # and their tiny translation pipeline

from pipeline_repo import STORE_FAULTS, TINY_PARAMS, ChattrMissing, break_store, make_repo, run, write_tiny_data  # noqa: E402
from results_file import Column, write_result  # noqa: E402

OUTPUTS = {  # per tiny pipeline: the output folders a fault must not change
    "classification": ["data/inputs", "data/prepared", "data/prepared_corpus", "data/tokenized",
                       "data/tokenized_corpus", "models", "metrics", "plots"],
    "translation": ["translation/data", "translation/models", "translation/metrics", "translation/plots"],
}
LMTRANSFER = [sys.executable, "-m", "lmtransfer.cli"]
REPRO = ["dvc", "repro"]
TRANSLATION_PARAMS = "translation/params.yaml"
TRANSLATION_REPRO = ["dvc", "repro", "translation/dvc.yaml"]
REPRO_OF = {"classification": REPRO, "translation": TRANSLATION_REPRO}
AGAINST = "committed/headline.json"  # a committed run's headline, read by `lmtransfer results --against committed`
PRETRAIN_SEEDS = r"seeds: +# one pretraining run[^\n]*\n\s*  - 0\n  - 1\n"
FINETUNE_SEEDS = r"seeds: +# fine-tunes per[^\n]*\n  - 0\n"


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
    pipeline: str = "classification"  # or "translation": the tiny copy of that pipeline it runs on
    runs: bool = False  # it must run (exit 0) and say every word of `expect`


def fingerprint(root: Path, pipeline: str = "classification") -> dict[str, str]:
    """md5 of every output file: what a fault must not take away."""
    return {p.relative_to(root).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
            for out in OUTPUTS[pipeline] for p in sorted((root / out).rglob("*")) if p.is_file()}


Apply = Callable[[Path], Callable[[], None]]  # makes the fault in the project at `root`; returns what undoes it


def together(*applies: Apply) -> Apply:
    """Several changes as one fault, undone in reverse order."""
    def apply(root: Path) -> Callable[[], None]:
        undos = [make(root) for make in applies]

        def undo() -> None:
            for each in reversed(undos):
                each()
        return undo
    return apply


def edit_params(old: str, new: str, params: str = "params.yaml") -> Apply:
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


def rerun_evaluate(samples: int) -> Apply:
    """A parameter that reruns evaluate, so the run meets the fault (a value of its own per case: DVC would
    restore a run it has cached)."""
    return edit_params(r"bootstrap_samples: \d+", f"bootstrap_samples: {samples}")


BUILT_IN_DATA = together(  # the built-in reviews asked for: `data.source: movies-en`, the file keys emptied
    edit_params(r"source: files", "source: movies-en"), edit_params(r"train: raw/labeled\.tsv", "train: ''"),
    edit_params(r"corpus:( +#[^\n]*)?\n(\s*\n)*  - raw/corpus\*\.txt\n", "corpus: []\n"))


def written(name: str, content: bytes) -> Apply:
    """A file of the project holding `content` (put back as it was, or removed, after)."""
    def apply(root: Path) -> Callable[[], None]:
        path = root / name
        original = path.read_bytes() if path.is_file() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return lambda: path.write_bytes(original) if original is not None else path.unlink()
    return apply


def cut_file(name: str, size: int) -> Apply:
    """A result file cut to its first `size` bytes."""
    return lambda root: written(name, (root / name).read_bytes()[:size])(root)


def moved_away(name: str) -> Apply:
    """A file of the project moved out of the way."""
    def apply(root: Path) -> Callable[[], None]:
        path, kept = root / name, root / f"{name}.kept"
        path.rename(kept)
        return lambda: kept.rename(path)
    return apply


def immutable(name: str, make: Callable[[Path], None] = lambda path: None) -> Apply:
    """`name` (made by `make` first, removed after if it was) made immutable with `chattr +i`: the battery runs as
    root, whom chmod would not stop."""
    def apply(root: Path) -> Callable[[], None]:
        path = root / name
        existed = path.exists()
        make(path)
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
            if not existed:
                path.rmdir()
            raise ChattrMissing(name)

        def undo() -> None:
            subprocess.run(["chattr", "-i", str(path)], check=True)
            if not existed:
                path.rmdir()
        return undo
    return apply


def course_folder(root: Path) -> Callable[[], None]:
    """The course's profile (profiles/course.yaml), without its files (none fetched)."""
    (root / "profiles").mkdir()
    shutil.copy(REPO / "profiles" / "course.yaml", root / "profiles" / "course.yaml")
    return lambda: shutil.rmtree(root / "profiles")


def copied_store(root: Path) -> Callable[[], None]:
    """The store as a copied project has it: its experiments keep their artifacts in another checkout's
    `mlartifacts/`."""
    store = root / "mlflow.db"
    kept = store.read_bytes()
    with sqlite3.connect(store) as db:
        db.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id != 0",
                   ((root.parent / "original" / "mlartifacts").as_uri(),))
    db.close()
    return lambda: store.write_bytes(kept)


def cases() -> list[Case]:
    """The battery. Values differ from those the tests use, so that it checks the rules, not the examples."""
    params = [
        ("d_model negative", r"d_model: 16", "d_model: -16", ("model.d_model",)),
        ("heads do not divide the width", r"n_heads: 2", "n_heads: 5", ("model.n_heads", "model.d_model")),
        ("learning rate a word", r"^  lr: 0\.001", "  lr: fast", ("finetune.lr",)),
        ("unknown key", r"^  n_layers: 1", "  n_layers: 1\n  layers: 3", ("model.layers",)),
        ("no pretraining seeds", PRETRAIN_SEEDS, "seeds: []\n", ("pretrain.seeds",)),
        ("vocabulary of zero", r"vocab_size: 60", "vocab_size: 0", ("tokenizer.vocab_size",)),
        ("negative bootstrap", r"bootstrap_samples: \d+", "bootstrap_samples: -5", ("evaluate.bootstrap_samples",)),
        ("zero processes", r"^  nproc: \d+", "  nproc: 0", ("train.nproc",)),
        ("dropout above one", r"^  dropout: 0\.1", "  dropout: 1.5", ("model.dropout",)),
        ("a list where a number goes", r"max_steps: 12", "max_steps: [12]", ("pretrain.max_steps",)),
    ]
    battery = [Case("params", name, REPRO, expect, edit_params(old, new)) for name, old, new, expect in params]
    grid = [  # DVC lays out the stage grid from these before any stage runs: `make run` checks them first
        ("pretraining seeds a number", PRETRAIN_SEEDS, "seeds: 3\n", ("params.yaml", "pretrain.seeds")),
        ("fine-tuning seeds a number", FINETUNE_SEEDS, "seeds: 2.5\n", ("params.yaml", "finetune.seeds")),
        ("fine-tuning seeds a word", FINETUNE_SEEDS, "seeds: abc\n", ("finetune.seeds",)),
        ("pretraining seeds left empty", PRETRAIN_SEEDS, "seeds:\n", ("params.yaml", "pretrain.seeds")),
    ]
    battery += [Case("params", f"{name}, checked first", [*LMTRANSFER, "params", "--check", "params.yaml"], expect,
                     edit_params(old, new)) for name, old, new, expect in grid]
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
                 else together(written("raw/bad.tsv", content),
                               edit_params(r"train: raw/labeled\.tsv", "train: raw/bad.tsv")))
        battery.append(Case("data files", name, REPRO, expect, apply))
    knobs = [
        ("LMTRANSFER_JOBS", "1.5"), ("LMTRANSFER_JOBS", "two"), ("LMTRANSFER_CPU_KERNELS", "avx512"),
        ("LMTRANSFER_DEBUG", "verbose"),
    ]
    for variable, value in knobs:
        for command in ([*LMTRANSFER, "results"], ["dvc", "repro", "validate"]):
            battery.append(Case("environment", f"{variable}={value} ({command[-1]})", command, (variable,),
                                env={variable: value}))
    for name, cache in (("cache a file", written("cache-dir", b"not a folder")),
                        ("cache unwritable", immutable("cache-dir", Path.mkdir))):  # the built-in data needs it
        battery.append(Case("environment", f"LMTRANSFER_CACHE_DIR: {name}", REPRO, ("LMTRANSFER_CACHE_DIR",),
                            together(cache, BUILT_IN_DATA), env={"LMTRANSFER_CACHE_DIR": "cache-dir"}))
    for fault in STORE_FAULTS:  # an empty file is an empty SQLite database: no run in it to lose, so it is built
        battery.append(Case("store", fault, REPRO, () if fault == "empty file" else ("mlflow.db",),
                            together(lambda root, fault=fault: break_store(root, fault), rerun_evaluate(170))))
    committed = [("empty list", b"[]"), ("headline a number", b'{"headline": 3}'), ("headline empty",
                 b'{"headline": {}}'), ("cut short", b'{"head'), ("binary", bytes(range(256)))]
    for name, content in committed:
        battery.append(Case("committed run", name, [*LMTRANSFER, "results", "--against", "committed"], (AGAINST,),
                            written(AGAINST, content)))
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
    # issue 71's surfaces: translation's late refusals, init_from, result files, params.yaml, course, artifacts
    translation = [
        ("vocabulary below the characters", r"vocab_size: 45", "vocab_size: 20", ("tokenizer.vocab_size=20",)),
        ("lab sentences absent", r"lab_sentences: \.\./raw/lab\.tsv", "lab_sentences: ../raw/lab-gone.tsv",
         ("../raw/lab-gone.tsv", "evaluate.lab_sentences")),
        # the tiny pairs' shortest takes 5 tokens, and finetune.max_len is at least 4: 4 is the one value no pair fits
        ("max_len no pair fits", r"max_len: 16", "max_len: 4", ("finetune.max_len=4",)),
        ("an example of spaces", r"^  - the cat sleeps", "  - the cat sleeps\n  - '   '", ("finetune.examples",)),
        ("init_from a pretraining run", r"init_from: ''", "init_from: models/pretrained/seed1.pt",
         ("pretrain.init_from", "'pretrain'")),
    ]
    battery += [Case("translation", name, TRANSLATION_REPRO, expect, edit_params(old, new, TRANSLATION_PARAMS),
                     pipeline="translation") for name, old, new, expect in translation]
    battery += [
        Case("params", "init_from a scratch fine-tune", REPRO, ("pretrain.init_from", "'finetune_scratch'"),
             together(edit_params(PRETRAIN_SEEDS, "seeds: [0]\n"),
                      edit_params(r"init_from: ''", "init_from: models/finetuned/scratch/seed0-0.pt"))),
        Case("missing files", "params.yaml missing", REPRO, ("params.yaml is missing",), moved_away("params.yaml")),
        Case("missing files", "params.yaml missing, checked first", [*LMTRANSFER, "params", "--check", "params.yaml"],
             ("params.yaml: parameter file not found",), moved_away("params.yaml")),
        Case("result files", "evaluate.json cut short", [*LMTRANSFER, "results"], ("metrics/evaluate.json",),
             cut_file("metrics/evaluate.json", 217)),
        Case("result files", "headline cut short", [*LMTRANSFER, "results"],
             ("metrics/headline.json",), cut_file("metrics/headline.json", 40)),
        Case("command line", "course with an unknown --set key", [*LMTRANSFER, "course", "--set", "model.depth=3",
             "--url", "http://127.0.0.1:9/"], ("model.depth",), course_folder),
        Case("artifacts", "a copied project's store", REPRO, ("kept its artifacts in", "copied"),
             together(copied_store, rerun_evaluate(180)), runs=True),
        Case("artifacts", "read-only artifact folder", REPRO, ("mlartifacts cannot be written",),
             together(immutable("mlartifacts"), rerun_evaluate(190))),
    ]
    return battery


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
    must_run, said = not case.expect or case.runs, all(word in output for word in case.expect)
    if lost and result.returncode != 0:  # a run that stopped must leave every output as it was
        return "lost"
    if "Traceback (most recent call last)" in output or "unexpected error" in output:
        return "traceback"
    if result.returncode == 0:
        return "ok" if must_run and said else "silent"
    return "misleading" if must_run or not said else "ok"


def build(folder: Path, pipeline: str) -> tuple[Path, dict[str, str]]:
    """The tiny copy of `pipeline` (the end-to-end tests'), run once."""
    root = folder / pipeline
    root.mkdir()
    started = time.time()
    print(f"fault battery: the tiny {pipeline} pipeline's first run in {root} ...", flush=True)
    if pipeline == "classification":
        env = make_repo(root, TINY_PARAMS, write_tiny_data)
    else:
        from test_pipeline_translation import TINY_TRANSLATION, write_pairs

        env = make_repo(root, TINY_TRANSLATION, write_pairs, params_file=TRANSLATION_PARAMS)
    run(REPRO_OF[pipeline], root, env)
    print(f"  done in {time.time() - started:.0f} s", flush=True)
    return root, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the tiny pipelines' folder")
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="run only the cases whose group or name holds TEXT (repeatable); the result file is "
                             "written only by a run of every case")
    args = parser.parse_args()
    chosen = [case for case in cases()
              if not args.only or any(text in f"{case.group} {case.name}" for text in args.only)]
    if not chosen:
        raise SystemExit(f"fault_battery: no case matches {args.only}")
    folder = Path(tempfile.mkdtemp(prefix="fault-battery-"))
    started = time.time()
    pipelines = {name: build(folder, name) for name in ("classification", "translation")
                 if any(case.pipeline == name for case in chosen)}
    rows = []
    for case in chosen:
        root, env = pipelines[case.pipeline]
        before = fingerprint(root, case.pipeline)
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
        after = fingerprint(root, case.pipeline)
        lost = sorted(name for name, digest in before.items() if after.get(name) != digest)
        verdict = outcome(case, result, lost)
        last = telling_line(result.stdout + result.stderr, root)
        print(f"{verdict:10s} {case.group:16s} {case.name:44s} {last}", flush=True)
        shown = " ".join(["lmtransfer", *case.command[3:]] if case.command[0] == sys.executable else case.command)
        rows.append([case.group, case.name, " ".join([*(f"{k}={v}" for k, v in case.env.items()), shown]),
                     verdict, result.returncode, last])
        if lost or "dvc" in case.command[0]:
            subprocess.run(REPRO_OF[case.pipeline], cwd=root, env=env, capture_output=True, text=True)  # back to clean
    counts = Counter(row[3] for row in rows)
    tally = {name: counts[name] for name in ("ok", "lost", "traceback", "silent", "misleading")}
    summary = f"{len(rows)} cases: " + ", ".join(f"{count} {name}" for name, count in tally.items())
    print(f"\n{summary} ({time.time() - started:.0f} s)")
    if args.only:
        print("fault battery: --only ran a selection, so benchmarks/results/fault_battery.json is left as it was")
    else:
        columns = [Column("group"), Column("case"), Column("what ran"), Column("outcome"), Column("exit"),
                   Column("what it said")]
        write_result("fault_battery", columns, rows, seconds=time.time() - started,
                     notes=summary + " (the tiny pipelines of the end-to-end tests, both tasks)")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
