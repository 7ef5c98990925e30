"""Each benchmark's numbers as benchmarks/results/<name>.json: the machine, the command, the commit, the columns and
rows it printed. The docs' benchmark tables are generated from these files (`lmtransfer report`, `bench@<name>`).

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
CODE = ("src", "stages", "benchmarks", ":(exclude)benchmarks/results", "tests", "params.yaml", "translation/params.yaml",
        "requirements.txt")  # what a measurement depends on: other benchmarks' result files are not


def pipeline_shape() -> dict:
    """params.yaml's model and pretraining batch, the shape the benchmarks time by default."""
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    model, pretrain = params["model"], params["pretrain"]
    return {"d_model": model["d_model"], "n_layers": model["n_layers"], "n_heads": model["n_heads"],
            "d_ff": model["d_ff"], "vocab": params["tokenizer"]["vocab_size"], "batch": pretrain["batch_size"],
            "length": pretrain["seq_len"]}


@dataclass(frozen=True)
class Column:
    name: str
    format: str = ""  # a format spec for numbers (",.0f", ".2f"); text cells print as they are


def machine() -> dict:
    """What a timing depends on besides the code: the CPU, its cores, the memory, the versions, a GPU if any."""
    import torch  # here, not at import: importing lmtransfer chooses how OpenMP waits, for child processes too

    from lmtransfer.modeling.runtime import cpu_identity

    facts = {"cpu": cpu_identity()["cpu_model"], "cpu_flags": cpu_flags(), "cores": os.cpu_count(),
             "python": platform.python_version(),
             "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
             "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
    return facts


def cpu_flags() -> str:
    """The CPU's flags that decide its fp32 and bf16 kernels, as /proc/cpuinfo names them."""
    try:
        found = set(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split())
    except (OSError, StopIteration):
        return "unknown"
    return " ".join(flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if flag in found) or "none"


def code_version() -> str:
    """The commit measured, with `+changes` when its code or params differed from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no", "--", *CODE)
    return f"{commit}+changes" if commit and changed else commit


def write_result(name: str, columns: list[Column], rows: list[list], *, seconds: float, notes: str = "",
                 command: str | None = None, machine_facts: dict | None = None, code: str | None = None) -> Path:
    """benchmarks/results/<name>.json, written whole or not at all; returns its path. `machine_facts` and `code`
    are given when the runs were measured elsewhere (a GPU machine)."""
    from lmtransfer.core.io import write_text

    if any(len(row) != len(columns) for row in rows):
        raise ValueError(f"{name}: every row needs {len(columns)} cells")
    if command is None:
        command = " ".join(["python", Path(sys.argv[0]).resolve().relative_to(REPO).as_posix(), *sys.argv[1:]])
    facts = machine_facts or machine()
    if facts.get("cpu_flags"):  # the table's caption names the CPU and its notes
        notes = "; ".join(filter(None, [f"CPU flags: {facts['cpu_flags']}", notes]))
    payload = {"benchmark": name, "command": command, "machine": facts,
               "code": code or code_version(), "seconds": round(seconds, 1), "notes": notes,
               "columns": [asdict(column) for column in columns], "rows": rows}
    path = RESULTS / f"{name}.json"
    write_text(path, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    print(f"results -> {path.relative_to(REPO)}")
    return path
