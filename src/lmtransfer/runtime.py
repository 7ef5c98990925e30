"""Where and how training runs: device choice, precision, seeding, threads."""

from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch

from .config import TrainParams
from .errors import DeviceError


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def environment_facts() -> dict[str, str | int]:
    """What CPU results depend on besides code, params and data: the kernels' instruction set and the threads.

    Stored beside the results, so a difference between two machines is explained, not a mystery; several
    processes (torchrun) add their count.
    """
    facts = {"cpu_kernels": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
    if torch.distributed.is_available() and torch.distributed.is_initialized():  # train.nproc > 1: threads each
        facts["processes"] = torch.distributed.get_world_size()
    return facts


def configure(params: TrainParams, seed: int | None = None) -> torch.device:
    """Seed (train.seed unless given), set CPU threads, pick the device; called once by each training stage."""
    seed_everything(params.seed if seed is None else seed)
    if params.num_threads:
        torch.set_num_threads(params.num_threads)
    elif "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, os.cpu_count() or 1))
    device = select_device(params.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device
