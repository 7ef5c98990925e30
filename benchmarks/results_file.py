"""Each benchmark's numbers as a file beside it, `benchmarks/results/<name>.json`: the machine, the command, the
columns and rows it printed. The docs' benchmark tables are generated from these files (`lmtransfer report`,
table `bench:<name>`), never typed, so a number in the docs is always one a benchmark wrote.

    from results_file import Column, write_result
    write_result("cpu_kernels", [Column("workload"), Column("pinned tok/s", ",.0f")], rows, seconds=elapsed)
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
REPO = RESULTS.parents[1]


@dataclass(frozen=True)
class Column:
    name: str
    format: str = ""  # a format spec for numbers (",.0f", ".2f"); text cells print as they are


def cpu_model() -> str:
    """The CPU's marketing name (Linux), else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """What a timing depends on besides the code: the CPU, its cores, the memory, the versions, a GPU if any."""
    facts = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}
    try:
        facts["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        if torch.cuda.is_available():
            facts["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return facts


CODE = ("src", "stages", "benchmarks", ":(exclude)benchmarks/results", "tests", "params.yaml", "translation/params.yaml",
        "requirements.txt")  # what a measurement depends on: other benchmarks' result files are not


def code_version() -> str:
    """The commit measured, with `+changes` when its code or params differed from it (a pipeline run's own
    outputs, dvc.lock and metrics, and the benchmarks' result files do not count)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no", "--", *CODE)
    return f"{commit}+changes" if commit and changed else commit


def write_result(name: str, columns: list[Column], rows: list[list], *, seconds: float, notes: str = "",
                 command: str | None = None, machine_facts: dict | None = None, code: str | None = None) -> Path:
    """benchmarks/results/<name>.json, written whole or not at all; returns its path."""
    if any(len(row) != len(columns) for row in rows):
        raise ValueError(f"{name}: every row needs {len(columns)} cells")
    payload = {
        "benchmark": name,
        "command": command or " ".join(["python", Path(sys.argv[0]).resolve().relative_to(REPO).as_posix(),
                                        *sys.argv[1:]]),
        "machine": machine_facts or machine(),  # given: the runs were measured elsewhere (a GPU machine)
        "code": code or code_version(),
        "seconds": round(seconds, 1),
        "notes": notes,
        "columns": [asdict(column) for column in columns],
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    print(f"results -> {path.relative_to(REPO)}")
    return path
