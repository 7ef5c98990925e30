"""With every pipeline present, bare `dvc metrics show` and `dvc exp show` show the built-in headline in 120 cols."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from pipeline_repo import REPO, run

pytestmark = pytest.mark.slow  # two DVC commands on a copy of the pipeline definitions: about 20 s

PIPELINES = ("dvc.yaml", "translation/dvc.yaml")
WIDTH, HEIGHT = 120, 40  # the terminal the views must fit


def _declared_metrics(pipeline: str) -> list[str]:
    """The files a dvc.yaml declares as metrics: its top-level `metrics:` and every stage's."""
    document = YAML(typ="safe").load((REPO / pipeline).read_text())
    entries = list(document.get("metrics", []))
    for stage in document["stages"].values():
        entries += stage.get("metrics", [])
    return [next(iter(e)) if isinstance(e, dict) else e for e in entries]


def test_only_the_built_in_pipeline_declares_metrics_and_no_other_copy_exists():
    assert _declared_metrics("dvc.yaml") == ["metrics/headline.json"]
    assert _declared_metrics("translation/dvc.yaml") == []
    copies = subprocess.run(["git", "ls-files", "dvc.yaml", "*/dvc.yaml"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    assert sorted(copies) == sorted(PIPELINES), "one pipeline per task: a variant is a profile (profiles/), not a copy"


@pytest.fixture(scope="module")
def every_pipeline(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A git copy of every pipeline, its params and committed headline (no data: the views read metrics alone)."""
    root = tmp_path_factory.mktemp("views")
    folders = [str(Path(pipeline).parent) for pipeline in PIPELINES]
    names = [".dvcignore", ".dvc/config", *PIPELINES, *(str(Path(f, "params.yaml")) for f in folders),
             *(name for f in folders if (REPO / (name := str(Path(f, "metrics", "headline.json")))).is_file())]
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "MLFLOW_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", DVC_NO_ANALYTICS="1")
    for command in (["git", "init", "-q"], ["git", "config", "user.name", "t"], ["git", "config", "user.email", "t@t"],
                    ["git", "add", "-A"], ["git", "commit", "-qm", "views"]):
        run(command, root, env)
    return root, env


def _first_screen(command: list[str], root: Path, env: dict[str, str]) -> list[str]:
    """`command` in a WIDTH x HEIGHT pseudo-terminal, pager cat: what a pager cutting long lines (DVC's) shows."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", HEIGHT, WIDTH, 0, 0))
    shown = subprocess.Popen(command, cwd=root, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                             env={**env, "DVC_PAGER": "cat", "TERM": "xterm"})
    os.close(slave)
    chunks = []
    with contextlib.suppress(OSError):  # the other side closed
        while chunk := os.read(master, 65536):
            chunks.append(chunk)
    out = b"".join(chunks)
    os.close(master)
    assert shown.wait(timeout=120) == 0, out.decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.decode(errors="replace")).replace("\r", "")
    return [line[:WIDTH] for line in text.splitlines()[:HEIGHT]]


def test_dvc_metrics_show_is_the_built_in_headline_alone_within_120_columns(every_pipeline):
    root, env = every_pipeline
    table = run(["dvc", "metrics", "show"], root, {**env, "COLUMNS": str(WIDTH)}).splitlines()
    assert [line.split()[0] for line in table[1:]] == ["metrics/headline.json"]
    assert max(len(line) for line in table) <= WIDTH and {"pretrained", "scratch", "gap"} <= set(table[0].split())


def test_dvc_exp_show_has_pretrained_scratch_and_gap_on_its_first_screen(every_pipeline):
    root, env = every_pipeline
    screen = _first_screen(["dvc", "exp", "show"], root, env)
    header = next(line for line in screen if "Experiment" in line)
    assert {"pretrained", "scratch", "gap"} <= set(header.split()), header
    assert "headline.json:" not in header
