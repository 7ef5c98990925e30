"""Shared by the end-to-end tests: a throwaway git + DVC copy of this repository with tiny params and data."""

from __future__ import annotations

import json
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

VARIANTS = ("pretrained", "scratch")
RUNS = ("0-0", "1-0")  # pretraining runs 0 and 1 (TINY_PARAMS' pretrain.seeds), fine-tuning seed 0 each
PRETRAINS = {"pretrain@0", "pretrain@1"}
FINETUNES = {f"finetune_{v}@{r}" for v in VARIANTS for r in RUNS}
SCRATCH = {f"finetune_scratch@{r}" for r in RUNS}

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


def repo_env(root: Path) -> dict[str, str]:
    """The environment the commands of a tiny repository at `root` run in: its own code, this Python, no MLflow, DVC
    or lmtransfer variable of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "LMTRANSFER_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as `make` does: each stage would compile torch and MLflow anew
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(root / "src")  # the copy's code, not the installed checkout's
    env.update(DVC_NO_ANALYTICS="1")
    # One job, whatever runs beside: `make test` runs two tests at a time, and the DVC queue workers one of them
    # starts would count, for every stage on the machine, as jobs sharing it (a thread each, other numbers).
    env["LMTRANSFER_JOBS"] = "1"
    return env


def make_repo(root: Path, params: dict, write_data: Callable[[Path], None],
              params_file: str = "params.yaml") -> dict[str, str]:
    """Copy the pipeline into `root`, apply `params` over `params_file` (translation/params.yaml: the translation
    pipeline is copied too; profiles/NAME.yaml: that profile), add the data, commit; returns the env.

    The translation pipeline is copied only for its own tests: `dvc status` and `dvc metrics show` without a
    target cover every dvc.yaml of a repository, and the classification tests read them whole."""
    names = ["dvc.yaml", ".dvcignore", ".gitignore", "params.yaml"]
    if params_file.startswith("translation/"):  # a pipeline in a folder of its own, evaluate's default dependency
        names += ["translation/dvc.yaml", "translation/params.yaml", "translation/lab_sentences.tsv"]
    if params_file.startswith("profiles/"):
        names.append(params_file)
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    for name in ("stages", "src", ".dvc"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("tmp", "cache", "__pycache__"))
    yaml = YAML()
    merged = merge(yaml.load((root / params_file).read_text()), params)
    with open(root / params_file, "w") as handle:
        yaml.dump(merged, handle)
    write_data(root)
    env = repo_env(root)
    run(["git", "init", "-q"], root, env)
    run(["git", "config", "user.name", "lmtransfer tests"], root, env)  # a clean CI machine has no identity
    run(["git", "config", "user.email", "tests@lmtransfer.invalid"], root, env)
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-qm", "tiny pipeline"], root, env)
    return env


def changed_stages(root: Path, env: dict[str, str]) -> set[str]:
    """What `dvc status` would rerun, leaving out validate (it runs every time, by design)."""
    status = json.loads(run(["dvc", "status", "--json"], root, env) or "{}")
    return {stage.split(":")[-1] for stage in status} - {"validate"}


def stages_to_rerun(root: Path, env: dict[str, str], key: str, value: str) -> set[str]:
    """What `dvc status` would rerun with params.yaml's `key` (section.name) set to `value` (YAML), params.yaml
    then put back as it was."""
    params_file = root / "params.yaml"
    original = params_file.read_text()
    try:
        yaml = YAML()
        params = yaml.load(original)
        section, name = key.split(".")
        params[section][name] = YAML(typ="safe").load(value)  # plain values: a flow list in place of a block one
        # under a commented key makes ruamel glue the next lines together
        with open(params_file, "w") as handle:
            yaml.dump(params, handle)
        return changed_stages(root, env)
    finally:
        params_file.write_text(original)


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


def session_folder(tmp_path_factory) -> Path:
    """This pytest session's temporary folder, the same for its xdist workers (each has a folder of its own in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name` of this session, made by `build(folder)` the first time any worker asks for it; a worker
    asking meanwhile waits (a file lock). A build that failed is not tried again: the others fail at once, naming
    it."""
    from filelock import FileLock

    shared = session_folder(tmp_path_factory)
    folder, done, failed = shared / name, shared / f"{name}.done", shared / f"{name}.failed"
    with FileLock(str(shared / f"{name}.lock")):
        if failed.exists():
            raise AssertionError(f"building {name} failed in another test: {failed.read_text()[-3000:]}")
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException as exc:
                failed.write_text(f"{type(exc).__name__}: {exc}")
                raise
            done.touch()
    return folder


def copy_repo(source: Path, root: Path) -> dict[str, str]:
    """A copy of the tiny repository `source` at `root` (git, DVC cache, MLflow store: as `cp -a` makes one, which
    is how a user makes one too); returns the copy's environment."""
    shutil.copytree(source, root, symlinks=True)
    return repo_env(root)


def results_of(root: Path) -> dict[str, bytes]:
    """Everything a run produces that must not vary: dvc.lock (hashes of data, models) and metrics/."""
    files = {"dvc.lock": (root / "dvc.lock").read_bytes()}
    files.update({str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "metrics").rglob("*")) if p.is_file()})
    return files


def tiny_pipeline(tmp_path_factory) -> Path:
    """The tiny classification pipeline (TINY_PARAMS) after one `dvc repro`, built once a session: the tests copy it,
    never change it."""
    def build(root: Path) -> None:
        env = make_repo(root, TINY_PARAMS, write_tiny_data)
        run(["dvc", "repro"], root, env)

    return built_once(tmp_path_factory, "tiny-pipeline", build)
