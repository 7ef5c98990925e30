"""`train.nproc: N`: the stage runs itself again as N processes under torchrun (gloo on CPU, NCCL on GPUs), with DDP.

Every rank draws the same global batches and trains on its share of their rows, its loss weighted by that share, so
the all-reduced gradient is the whole batch's (dropout is each rank's own). Rank 0 alone prints, logs and writes."""

from __future__ import annotations

import atexit
import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from lmtransfer.core.config import TrainParams
from lmtransfer.core.errors import ConfigError, LmtransferError
from lmtransfer.modeling.runtime import parallel_jobs, thread_share


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1


def world() -> World:
    """This process's place in the job: World(0, 1) unless a process group is running."""
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return World()


def under_launcher() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ  # set by torchrun in every process


def launch(nproc: int) -> None:
    """nproc > 1 outside a launcher: this very command as `nproc` processes sharing its threads, then exit."""
    if nproc <= 1 or under_launcher():
        return
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    total = int(os.environ.get("OMP_NUM_THREADS") or 0) or thread_share(parallel_jobs())  # this job's cores
    os.environ["OMP_NUM_THREADS"] = str(max(1, total // nproc))  # train.num_threads, if set, is split in `start`
    args = get_args_parser().parse_args(["--standalone", "--nproc-per-node", str(nproc), sys.argv[0], *sys.argv[1:]])
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)  # a failure is reported below
    print(f"train.nproc={nproc}: {nproc} processes under torchrun (gloo on CPU, NCCL on GPUs)", flush=True)
    try:
        run(args)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode == 1:  # the rank printed the stage's one-line error itself
            sys.exit(1)
        raise LmtransferError(f"process {rank} of {nproc} ended with exit code {failure.exitcode} "
                              f"({failure.signal_name()}); its output is above") from None
    sys.exit(0)


def start(params: TrainParams, device: torch.device) -> torch.device:
    """Under a launcher with several processes: join the group and return this rank's device (`train.num_threads`
    shared by one machine's processes); else `device` unchanged."""
    if not under_launcher() or int(os.environ["WORLD_SIZE"]) == 1:
        return device
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"train.nproc > 1 runs on CPU (gloo) or CUDA GPUs (NCCL), not on {device.type}; "
                          "set train.device: cpu or train.nproc: 1")
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    if params.num_threads:
        per_machine = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        torch.set_num_threads(max(1, params.num_threads // per_machine))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())
    if world().rank != 0:
        sys.stdout = open(os.devnull, "w")  # rank 0 reports; errors (stderr) still show from every rank
    return device


class Draws:
    """Under DDP torch's global generator serves the data's draws (masked-LM corruption: the same on every rank) and
    dropout (each rank its own, seeded from the seed and the rank); `close` leaves the shared stream in place."""

    def __init__(self, seed: int):
        self.world = world()
        if self.world.size > 1:
            self.shared = torch.get_rng_state()
            torch.manual_seed(int(np.random.SeedSequence([seed, self.world.rank]).generate_state(1)[0]))

    def batches(self, iterable: Iterable) -> Iterator:
        if self.world.size == 1:
            yield from iterable
            return
        iterator = iter(iterable)
        while True:
            own = torch.get_rng_state()
            torch.set_rng_state(self.shared)
            try:
                batch = next(iterator)
            except StopIteration:
                return
            finally:
                self.shared = torch.get_rng_state()
                torch.set_rng_state(own)
            yield batch

    def close(self) -> None:
        if self.world.size > 1:
            torch.set_rng_state(self.shared)


class _Compute(nn.Module):
    """What DDP wraps: the training computation (DDP synchronises the gradients of what runs in its forward)."""

    def __init__(self, model: nn.Module, compute: Callable[..., dict[str, torch.Tensor]]):
        super().__init__()
        self.model, self.compute = model, compute

    def forward(self, *batch: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.compute(self.model, *batch)


def wrap(model: nn.Module, compute: Callable[..., dict[str, torch.Tensor]], device: torch.device,
         unused_parameters: bool = False) -> nn.Module:
    """`compute(model, *rows)` as a module, under DDP with several processes; `unused_parameters`: the next-sentence
    head idles in the adaptation phase. Buffers are the same everywhere: not synchronised."""
    if world().size == 1:
        return _Compute(model, compute)
    ddp = nn.parallel.DistributedDataParallel
    buffers = "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(ddp).parameters else \
        "broadcast_buffers"  # torch renamed it
    return ddp(_Compute(model, compute), device_ids=[device.index] if device.type == "cuda" else None,
               find_unused_parameters=unused_parameters, **{buffers: False})


def share(n: int, world: World) -> slice:
    """This rank's contiguous part of n rows; the first ranks take the extra rows."""
    base, extra = divmod(n, world.size)
    begin = world.rank * base + min(world.rank, extra)
    return slice(begin, begin + base + (world.rank < extra))


def my_rows(batch: Sequence[torch.Tensor], world: World) -> tuple[list[torch.Tensor], float]:
    """This rank's rows of a global batch and 1.0, or with none the first row and 0.0 (all join the all-reduce)."""
    rows = share(batch[0].size(0), world)
    if rows.start == rows.stop:
        return [tensor[:1] for tensor in batch], 0.0
    return [tensor[rows] for tensor in batch], 1.0


def sum_over_ranks(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each value summed over the ranks (one all-reduce): weighted shares become the global batch's."""
    if world().size == 1:
        return {key: value.detach() for key, value in values.items()}
    stacked = torch.stack([value.detach().float().reshape(()) for value in values.values()])
    dist.all_reduce(stacked)
    return dict(zip(values, stacked))
