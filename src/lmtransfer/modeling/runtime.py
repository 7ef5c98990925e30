"""Where and how training runs: device, precision, seeding, threads."""

from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch

from lmtransfer.core import knobs
from lmtransfer.core.config import TrainParams
from lmtransfer.core.errors import DeviceError

QUEUE_WORKER = "queue-worker"  # in the command line of each `dvc queue start -j N` worker process


def select_device(requested: str = "auto") -> torch.device:
    """auto = CUDA, else Apple MPS, else CPU; an explicit choice that is unavailable is an error."""
    cuda, mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    if requested == "auto":
        return torch.device("cuda" if cuda else "mps" if mps else "cpu")
    if (requested == "cuda" and not cuda) or (requested == "mps" and not mps):
        raise DeviceError(f"train.device={requested!r} but no {requested.upper()} device is available; use 'auto'")
    return torch.device(requested)


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on GPUs that support it; full precision elsewhere (CPU results stay exact)."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def to_device(tensors, device: torch.device) -> list[torch.Tensor]:
    """A batch onto the device; to a GPU from pinned memory, the copy overlapping the previous step's kernels."""
    if device.type != "cuda":
        return [tensor.to(device) for tensor in tensors]
    return [tensor.pin_memory().to(device, non_blocking=True) for tensor in tensors]


def compiled(function, enabled: bool):
    """`train.compile`: the function through torch.compile (fused kernels), else as is."""
    return torch.compile(function) if enabled else function


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def cpu_identity() -> dict[str, str]:
    """The CPU's vendor and model ("unknown" off Linux): an Intel and an AMD CPU round a few operations apart."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as info:
        for line in info:
            key, _, value = line.partition(":")
            found.setdefault(key.strip(), value.strip())
    return {"cpu_vendor": found.get("vendor_id", "unknown"), "cpu_model": found.get("model name", "unknown")}


def environment_facts() -> dict[str, str | int]:
    """What CPU results depend on besides code, params and data: the CPU, its kernels, the threads, the processes."""
    facts = {"cpu_model": cpu_identity()["cpu_model"], "cpu_kernels": torch.backends.cpu.get_cpu_capability(),
             "threads": torch.get_num_threads()}
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        facts["processes"] = torch.distributed.get_world_size()
    return facts


def flush_denormals() -> bool:
    """Subnormal floats count as zero, as on GPUs (each costs ~100 cycles); before torch's threads, which copy it."""
    return torch.set_flush_denormal(True)


def queue_workers() -> int:
    """DVC experiment-queue workers running on this machine, any repository's."""
    import psutil

    commands = [process.info["cmdline"] or [] for process in psutil.process_iter(["cmdline"])]
    return sum(QUEUE_WORKER in command and any(part.startswith("dvc-exp-") for part in command) for command in commands)


def parallel_jobs() -> int:
    """Training jobs sharing this machine: LMTRANSFER_JOBS, else inside a DVC stage the queue workers, else 1."""
    if jobs := knobs.read(knobs.JOBS):
        return jobs
    if "DVC_ROOT" not in os.environ and "DVC_EXP_NAME" not in os.environ:
        return 1  # not a pipeline stage: a notebook, the CLI, the tests
    return max(1, queue_workers())


def thread_share(jobs: int, cores: int | None = None) -> int:
    """Threads for one of `jobs` jobs on `cores` cores (default: this machine's), at least one."""
    return max(1, (cores or os.cpu_count() or 1) // jobs)


def use_share_of_cores() -> int:
    """All cores alone, cores / jobs beside other jobs; OMP_NUM_THREADS, when set, stays. Returns the threads."""
    flush_denormals()
    if "OMP_NUM_THREADS" not in os.environ:
        jobs = parallel_jobs()
        torch.set_num_threads(thread_share(jobs))
        if jobs > 1:
            print(f"{torch.get_num_threads()} thread(s) of {os.cpu_count()} cores: {jobs} jobs share this machine "
                  f"(LMTRANSFER_JOBS or DVC queue workers); train.num_threads sets it", flush=True)
    return torch.get_num_threads()


def configure(params: TrainParams, seed: int = 0) -> torch.device:
    """Seed, set CPU threads, pick the device: once per training stage, before its parallel work."""
    seed_everything(seed)
    if params.num_threads:
        flush_denormals()
        torch.set_num_threads(params.num_threads)
    else:
        use_share_of_cores()
    device = select_device(params.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device
