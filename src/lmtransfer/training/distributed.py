"""Several processes, one training run: PyTorch's launcher (torchrun) and DistributedDataParallel (`train.nproc`).

With `train.nproc: N` a training stage runs itself again as N processes under
`python -m torch.distributed.run --standalone --nproc-per-node N` (`launch`); a
user may also start torchrun themselves (several machines: `--nnodes`,
`--rdzv-backend c10d --rdzv-endpoint host:port`). Under the launcher (`start`):
gloo on CPU, NCCL on GPUs (`cuda:LOCAL_RANK`), and

* every rank draws the same global batches from the same seeded generators and
  trains on its contiguous share of their rows (`my_rows`); each rank's mean loss
  is weighted by its share of the global count (scored tokens, texts), so the
  all-reduced gradient is one process's gradient of the whole batch, and
  clipping follows the all-reduce: curves match one process within float
  rounding. Dropout is the exception: each rank draws its own rows' masks from
  its own seeded generator (`Draws`), so the match needs `model.dropout: 0`;
* every rank validates on the same fixed batches (no communication, the same
  numbers on every rank);
* rank 0 alone prints, logs to MLflow and writes outputs; resume snapshots are off.
"""

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

LAUNCHER_ENV = ("LOCAL_RANK", "WORLD_SIZE")  # set by torchrun in every process it starts


class ProcessFailedError(LmtransferError, RuntimeError):
    """A process of a torchrun job ended without the project's own error message (a crash, a signal)."""


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world() -> World:
    """This process's place in the job: World(0, 1) unless a process group is running."""
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return World()


def under_launcher() -> bool:
    return all(name in os.environ for name in LAUNCHER_ENV)


def launch(nproc: int) -> None:
    """nproc > 1 outside a launcher: run this very command as `nproc` processes under torchrun, then exit with
    its status. Each process gets an equal share of the threads this one would use (OMP_NUM_THREADS)."""
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
        raise ProcessFailedError(f"process {rank} of {nproc} ended with exit code {failure.exitcode} "
                                 f"({failure.signal_name()}); its output is above") from None
    sys.exit(0)


def start(params: TrainParams, device: torch.device) -> torch.device:
    """Under a launcher with several processes: join the group (NCCL on CUDA, gloo on CPU) and return this
    rank's device; `train.num_threads` is shared by the processes of one machine. Otherwise `device` unchanged."""
    if not under_launcher() or int(os.environ["WORLD_SIZE"]) == 1:
        return device
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"train.nproc > 1 runs on CPU (gloo) or CUDA GPUs (NCCL), not on {device.type}; "
                          "set train.device: cpu or train.nproc: 1")
    local_rank = int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    if params.num_threads:
        per_machine = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
        torch.set_num_threads(max(1, params.num_threads // per_machine))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    atexit.register(finish)
    if not world().is_main:
        sys.stdout = open(os.devnull, "w")  # rank 0 reports; errors (stderr) still show from every rank
    return device


def finish() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_seed(seed: int, rank: int) -> int:
    """A seed of its own for each rank's dropout draws, derived from the run's seed."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


class Draws:
    """Under DDP, torch's global generator serves two purposes that must not mix: the data's random draws
    (masked-LM corruption), the same on every rank, and dropout, each rank its own. One process: nothing changes.

    `batches` draws each batch from the shared stream; `close` leaves the shared stream in place, as one process
    would continue (the next phase, the samples)."""

    def __init__(self, seed: int):
        self.world = world()
        if self.world.size > 1:
            self.shared = torch.get_rng_state()
            torch.manual_seed(rank_seed(seed, self.world.rank))

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
    """`compute(model, *rows)` as a module, under DDP with several processes; `unused_parameters` when some take no
    part (a next-sentence head while the adaptation phase trains masked tokens only). Buffers are not
    synchronised: they are the same everywhere."""
    if world().size == 1:
        return _Compute(model, compute)
    ddp = nn.parallel.DistributedDataParallel
    buffers = "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(ddp).parameters else \
        "broadcast_buffers"  # torch renamed it
    return ddp(_Compute(model, compute), device_ids=[device.index] if device.type == "cuda" else None,
               find_unused_parameters=unused_parameters, **{buffers: False})


def share(n: int, world: World) -> slice:
    """This rank's contiguous part of n rows: sizes differ by one at most, the first ranks take the extra rows."""
    base, extra = divmod(n, world.size)
    begin = world.rank * base + min(world.rank, extra)
    return slice(begin, begin + base + (world.rank < extra))


def my_rows(batch: Sequence[torch.Tensor], world: World) -> tuple[list[torch.Tensor], float]:
    """This rank's rows of a global batch, and 1.0; a rank left without rows (a last batch smaller than the
    world) computes on the first row with weight 0.0, as every rank must take part in the gradient all-reduce."""
    rows = share(batch[0].size(0), world)
    if rows.start == rows.stop:
        return [tensor[:1] for tensor in batch], 0.0
    return [tensor[rows] for tensor in batch], 1.0


def sum_over_ranks(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each value summed over the ranks (one all-reduce): weighted shares become the global batch's value."""
    if world().size == 1:
        return {key: value.detach() for key, value in values.items()}
    stacked = torch.stack([value.detach().float().reshape(()) for value in values.values()])
    dist.all_reduce(stacked)
    return dict(zip(values, stacked))
