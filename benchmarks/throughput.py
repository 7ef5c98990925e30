"""Training throughput (tokens/s) of the language model for a few sizes, measured side by side.

Numbers, not pass/fail: machines are noisy, so compare rows of one run, e.g.

    python benchmarks/throughput.py                 # default sizes on the auto-selected device
    python benchmarks/throughput.py --device cpu --steps 20
    python benchmarks/throughput.py --compile        # the reference size eager and under train.compile
    python benchmarks/throughput.py --gpu            # on a CUDA GPU: fp32 (TF32) and bf16, eager and compiled

With `--gpu`, the reference size runs at the pipeline's batch (32 x 64) and at a GPU-sized one (256 x 256), in
full precision with TF32 matrix products (what `train.device: cuda` does without autocast) and in bf16 autocast
(the pipeline's choice on a GPU that has it), eager and compiled; beside tokens/s it prints the model FLOP/s
(6 x parameters + 12 x layers x D x T per token, as nanoGPT counts them, backward included) and the peak GPU memory.

Denormals are flushed first, as the pipeline's stages do (`runtime.flush_denormals`). With `--compile`,
inductor compiles into an empty cache of its own (unless TORCHINDUCTOR_CACHE_DIR is set), so the first
steps' seconds include the whole compilation. The table goes to `benchmarks/results/throughput[-compile].json`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time

import torch

from lmtransfer.modeling.model import LanguageModel, ModelConfig, count_parameters
from lmtransfer.modeling.runtime import autocast, compiled, flush_denormals, select_device
from lmtransfer.training.optim import make_optimizer

from results_file import Column, write_result

SIZES = [  # (label, vocab, d_model, n_layers, n_heads, d_ff)
    ("reference D=200 N=4, V=4000", 4000, 200, 4, 2, 200),
    ("same, V=8000", 8000, 200, 4, 2, 200),
    ("narrow D=128 N=4, V=4000", 4000, 128, 4, 2, 128),
    ("deep D=200 N=6, V=4000", 4000, 200, 6, 2, 200),
]


def tokens_per_second(model: LanguageModel, device, batch_size: int, seq_len: int, steps: int,
                      compile_steps: bool = False, bf16: bool = True) -> tuple[float, float]:
    """Tokens/s over `steps` timed steps, and the seconds of the 3 untimed first ones (compilation, if any).
    `bf16=False` keeps full precision on a GPU too (the CPU is full precision either way)."""
    optimizer = make_optimizer(model.parameters(), 1e-3, 0.0)
    ids = torch.randint(0, model.head.out_features, (batch_size, seq_len + 1), device=device)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    loss_of = compiled(model.loss, compile_steps)

    def step() -> None:
        with autocast(device) if bf16 else contextlib.nullcontext():
            loss = loss_of(inputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def timed(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    first = timed(3)
    return steps * batch_size * seq_len / timed(steps), first


def flops_per_token(model: LanguageModel, seq_len: int) -> float:
    """Training FLOPs per token as nanoGPT's `estimate_mfu` counts them: 6 per weight (forward and backward) and
    the attention's 12 x layers x D x T."""
    config = model.base.config
    return 6 * count_parameters(model) + 12 * config.n_layers * config.d_model * seq_len


def gpu_matrix(device, steps: int) -> tuple[list[Column], list[list]]:
    """The reference size at two batch shapes, fp32 (TF32) and bf16, eager and compiled, one row each."""
    torch.backends.cuda.matmul.allow_tf32 = True  # as `runtime.configure` sets for train.device: cuda
    torch.backends.cudnn.allow_tf32 = True
    label, *shape = SIZES[0]
    vocab, d_model, n_layers, n_heads, d_ff = shape
    rows, baseline = [], None
    for batch_size, seq_len in ((32, 64), (256, 256)):
        for bf16 in (False, True):
            for compile_steps in (False, True):
                torch.manual_seed(0)
                torch.cuda.reset_peak_memory_stats(device)
                model = LanguageModel(ModelConfig(vocab, d_model, n_layers, n_heads, d_ff, dropout=0.1)).to(device)
                rate, first = tokens_per_second(model, device, batch_size, seq_len, steps, compile_steps, bf16)
                baseline = baseline or rate
                tflops = rate * flops_per_token(model, seq_len) / 1e12
                memory = torch.cuda.max_memory_allocated(device) / 2**30
                name = f"{batch_size} x {seq_len}, {'bf16' if bf16 else 'fp32 (TF32)'}, " + (
                    "compiled" if compile_steps else "eager")
                print(f"{name:<32} {rate:>12,.0f} tokens/s  x{rate / baseline:.2f}  {tflops:6.2f} TFLOP/s  "
                      f"{memory:5.2f} GiB  (first 3 steps {first:.1f} s)", flush=True)
                rows.append([name, rate, rate / baseline, tflops, memory, first])
                torch._dynamo.reset()
    columns = [Column("batch, precision, steps"), Column("tokens/s", ",.0f"), Column("vs first row", ".2f"),
               Column("model TFLOP/s", ".2f"), Column("peak GPU memory, GiB", ".2f"),
               Column("first 3 steps, s", ".1f")]
    return columns, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true",
                        help="the reference size eager and through torch.compile (train.compile), side by side")
    parser.add_argument("--gpu", action="store_true",
                        help="on a CUDA GPU: two batch shapes, fp32 (TF32) and bf16, eager and compiled")
    args = parser.parse_args()
    start = time.perf_counter()
    own_cache = (args.compile or args.gpu) and "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    if own_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    flush_denormals()
    device = select_device("cuda" if args.gpu else args.device)
    if args.gpu:
        columns, rows = gpu_matrix(device, args.steps)
        write_result("throughput-gpu", columns, rows, seconds=time.perf_counter() - start,
                     notes=f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}; the reference size "
                           f"(D=200 N=4, V=4000), {args.steps} timed steps; an empty compile cache")
        return
    print(f"device {device}, batch {args.batch_size} x {args.seq_len} tokens, {args.steps} timed steps")
    if args.compile:
        label, *shape = SIZES[0]
        runs = [(f"{label}, eager", shape, False), (f"{label}, compiled", shape, True)]
    else:
        runs = [(label, shape, False) for label, *shape in SIZES]
    baseline, rows = None, []
    for label, (vocab, d_model, n_layers, n_heads, d_ff), compile_steps in runs:
        torch.manual_seed(0)
        model = LanguageModel(ModelConfig(vocab, d_model, n_layers, n_heads, d_ff, dropout=0.1)).to(device)
        rate, first = tokens_per_second(model, device, args.batch_size, args.seq_len, args.steps, compile_steps)
        baseline = baseline or rate
        print(f"{label:<38} {count_parameters(model):>11,} params  {rate:>10,.0f} tokens/s  x{rate / baseline:.2f}"
              f"  (first 3 steps {first:.1f} s)")
        rows.append([label, count_parameters(model), rate, rate / baseline, first])
    columns = [Column("model"), Column("parameters", ",.0f"), Column("tokens/s", ",.0f"),
               Column("vs first row", ".2f"), Column("first 3 steps, s", ".1f")]
    write_result("throughput" + ("-compile" if args.compile else ""), columns, rows,
                 seconds=time.perf_counter() - start,
                 notes=f"device {device}, batch {args.batch_size} x {args.seq_len} tokens, {args.steps} timed steps"
                       + ("; an empty compile cache" if own_cache else ""))


if __name__ == "__main__":
    main()
