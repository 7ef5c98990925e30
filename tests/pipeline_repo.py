"""Shared by the end-to-end tests: a throwaway git + DVC copy of this repository with tiny params and data."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[1]

POSITIVE = ["great", "wonderful", "moving", "brilliant", "funny", "charming", "superb"]
NEGATIVE = ["awful", "boring", "dull", "clumsy", "tedious", "bland", "dreadful"]
NEUTRAL = ["the", "film", "movie", "story", "actors", "plot", "was", "is", "a", "and", "script", "ending"]

TINY_PARAMS = {
    "data": {"source": "files", "train": "raw/labeled.tsv", "corpus": ["raw/corpus*.txt"],
             "valid_fraction": 0.15, "test_fraction": 0.2},
    "tokenizer": {"vocab_size": 60},
    "model": {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 16},
    "pretrain": {"max_steps": 12, "batch_size": 8, "seq_len": 16, "eval_every": 6, "eval_batches": 2,
                 "warmup_steps": 2, "generate_tokens": 5, "prompts": ["the film"], "seeds": [0, 1]},
    "finetune": {"epochs": 2, "batch_size": 16, "max_len": 24, "warmup_steps": 2, "seeds": [0]},
    "baseline": {"c_values": [0.5, 2.0]},
    "train": {"log_every": 4},
}


def _sentence(rng: random.Random, sentiment: list[str]) -> str:
    words = rng.sample(NEUTRAL, 4) + rng.sample(sentiment, 2)
    rng.shuffle(words)
    return " ".join(words)


def write_tiny_data(root: Path) -> None:
    """raw/labeled.tsv (180 lines, three string classes) and a 400-line corpus in two files: seconds per stage."""
    rng = random.Random(0)
    raw = root / "raw"
    raw.mkdir()
    rows = ["text\tlabel"]
    classes = [("neg", NEGATIVE), ("neutral", NEUTRAL), ("pos", POSITIVE)]  # three string classes
    for index in range(180):
        name, words = classes[index % 3]
        rows.append(f"{_sentence(rng, words)} {index}\t{name}")
    (raw / "labeled.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    corpus = [_sentence(rng, rng.choice([POSITIVE, NEGATIVE])) + f" line {i}" for i in range(400)]
    (raw / "corpus-a.txt").write_text("\n".join(corpus[:250]) + "\n", encoding="utf-8")
    (raw / "corpus-b.txt").write_text("\n".join(corpus[250:]) + "\n", encoding="utf-8")


def merge(base: dict, override: dict) -> dict:
    for key, value in override.items():
        if isinstance(value, dict):
            merge(base.setdefault(key, {}), value)
        else:
            base[key] = value
    return base


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def kill_repro_when(root: Path, env: dict[str, str], snapshot_glob: str, *targets: str, latest: float = 0.3) -> None:
    """Start `dvc repro [targets]`; once a resume snapshot matching `snapshot_glob` exists, wait a random moment
    (up to `latest` seconds) and kill -9 the whole process group (dvc and its stage), as a power cut or an OOM kill
    would."""
    repro = subprocess.Popen(["dvc", "repro", *targets], cwd=root, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(root.glob(snapshot_glob)) and repro.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(random.uniform(0.0, latest))  # anywhere in the stage: training, writing outputs, logging
    if repro.poll() is None:
        os.killpg(repro.pid, signal.SIGKILL)
    repro.wait()


def make_repo(root: Path, params: dict, write_data: Callable[[Path], None],
              params_file: str = "params.yaml") -> dict[str, str]:
    """Copy the pipeline into `root`, apply `params` over `params_file` (translation/params.yaml: the translation
    pipeline is copied too), add the data, commit; returns the env.

    The translation pipeline is copied only for its own tests: `dvc status` and `dvc metrics show` without a
    target cover every dvc.yaml of a repository, and the classification tests read them whole."""
    names = ["dvc.yaml", ".dvcignore", "params.yaml"]
    for task in ("translation", "course"):  # a pipeline in a folder of its own: its dvc.yaml and params.yaml
        if params_file.startswith(f"{task}/"):
            (root / task).mkdir()
            names += [f"{task}/dvc.yaml", f"{task}/params.yaml"]
            names += [f"{task}/lab_sentences.tsv"] if task == "translation" else []  # evaluate's default dependency
    for name in names:
        shutil.copy(REPO / name, root / name)
    for name in ("stages", "src", ".dvc"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("tmp", "cache", "__pycache__"))
    yaml = YAML()
    merged = merge(yaml.load((root / params_file).read_text()), params)
    with open(root / params_file, "w") as handle:
        yaml.dump(merged, handle)
    write_data(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "LMTRANSFER_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(root / "src")  # the copy's code, not the installed checkout's
    env.update(DVC_NO_ANALYTICS="1")
    # One job, whatever runs beside: `make test` runs two tests at a time, and the DVC queue workers one of them
    # starts would count, for every stage on the machine, as jobs sharing it (a thread each, other numbers).
    env["LMTRANSFER_JOBS"] = "1"
    run(["git", "init", "-q"], root, env)
    run(["git", "config", "user.name", "lmtransfer tests"], root, env)  # a clean CI machine has no identity
    run(["git", "config", "user.email", "tests@lmtransfer.invalid"], root, env)
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-qm", "tiny pipeline"], root, env)
    return env


STORE_FAULTS = ("random bytes", "zeros in the middle", "first page gone", "cut to half", "empty file", "a directory",
                "read-only file", "read-only folder")


class ChattrMissing(RuntimeError):
    """`chattr +i` (an immutable file or folder) is not available on this machine."""


def break_store(root: Path, fault: str) -> Callable[[], None]:
    """Damage the MLflow store of `root` as `fault` (one of STORE_FAULTS) says; returns what undoes it. Read-only
    is made with `chattr +i`: the tests run as root, whom chmod would not stop."""
    store, kept = root / "mlflow.db", root / "mlflow.db.kept"
    shutil.copy2(store, kept)
    immutable = {"read-only file": store, "read-only folder": root}.get(fault)
    data = bytearray(store.read_bytes())
    if fault == "random bytes":
        data[len(data) // 2: len(data) // 2 + 32768] = random.Random(7).randbytes(32768)
    elif fault == "zeros in the middle":
        data[len(data) // 3: len(data) // 3 + 65536] = bytes(65536)
    elif fault == "first page gone":
        data[:4096] = random.Random(3).randbytes(4096)
    elif fault == "cut to half":
        data = data[: len(data) // 2]
    elif fault == "empty file":
        data = bytearray()
    if fault == "a directory":
        store.unlink()
        (store / "inside").mkdir(parents=True)
    elif immutable and subprocess.run(["chattr", "+i", str(immutable)], capture_output=True).returncode:
        kept.unlink()
        raise ChattrMissing(fault)
    elif not immutable:
        store.write_bytes(bytes(data))

    def undo() -> None:
        if immutable:
            subprocess.run(["chattr", "-i", str(immutable)], check=True)
        if store.is_dir():
            shutil.rmtree(store)
        os.replace(kept, store)

    return undo
