"""Training throughput (tokens/s) of the language model for a few sizes, side by side (compare rows of one run).

    python benchmarks/throughput.py                  # default sizes on the auto-selected device
    python benchmarks/throughput.py --compile        # the reference size eager and under train.compile
    python benchmarks/throughput.py --gpu            # on a CUDA GPU: fp32 (TF32) and bf16, eager and compiled

`--gpu` runs params.yaml's model at the pipeline's batch and at 256 x 256, with the model FLOP/s
(6 x parameters + 12 x layers x D x T per token, as nanoGPT counts them) and the peak GPU memory. Denormals are
flushed, as in the stages; with `--compile` or `--gpu` inductor starts from an empty cache of its own (unless
TORCHINDUCTOR_CACHE_DIR is set), so the first steps' seconds include the compilation.
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

from results_file import Column, pipeline_shape, write_result

_SHAPE = pipeline_shape()
_V, _D, _N, _A, _F = (_SHAPE[k] for k in ("vocab", "d_model", "n_layers", "n_heads", "d_ff"))
SIZES = [  # (label, vocab, d_model, n_layers, n_heads, d_ff): params.yaml's model first, the reference
    (f"params.yaml's D={_D} N={_N}, V={_V}", _V, _D, _N, _A, _F),
    (f"same, V={2 * _V}", 2 * _V, _D, _N, _A, _F),
    (f"narrow D={_D // 2}", _V, _D // 2, _N, _A, _F // 2),
    (f"deep N={_N + 2}", _V, _D, _N + 2, _A, _F),
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=_SHAPE["batch"])
    parser.add_argument("--seq-len", type=int, default=_SHAPE["length"])
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
    label, *reference = SIZES[0]
    if args.gpu:  # (name, shape, batch, length, compiled, bf16)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # as train.device: cuda
        runs = [(f"{batch} x {length}, {'bf16' if bf16 else 'fp32 (TF32)'}, {'compiled' if compile_steps else 'eager'}",
                 reference, batch, length, compile_steps, bf16)
                for batch, length in ((args.batch_size, args.seq_len), (256, 256))
                for bf16 in (False, True) for compile_steps in (False, True)]
    elif args.compile:
        runs = [(f"{label}, {how}", reference, args.batch_size, args.seq_len, how == "compiled", True)
                for how in ("eager", "compiled")]
    else:
        runs = [(label, shape, args.batch_size, args.seq_len, False, True) for label, *shape in SIZES]
    print(f"device {device}, {args.steps} timed steps")
    baseline, rows = None, []
    for name, (vocab, d_model, n_layers, n_heads, d_ff), batch, length, compile_steps, bf16 in runs:
        torch.manual_seed(0)
        if args.gpu:
            torch.cuda.reset_peak_memory_stats(device)
        model = LanguageModel(ModelConfig(vocab, d_model, n_layers, n_heads, d_ff, dropout=0.1)).to(device)
        rate, first = tokens_per_second(model, device, batch, length, args.steps, compile_steps, bf16)
        baseline = baseline or rate
        if args.gpu:
            rows.append([name, rate, rate / baseline, rate * flops_per_token(model, length) / 1e12,
                         torch.cuda.max_memory_allocated(device) / 2**30, first])
            torch._dynamo.reset()
        else:
            rows.append([name, count_parameters(model), rate, rate / baseline, first])
        print("  ".join(f"{cell:,.2f}" if isinstance(cell, float) else f"{cell}" for cell in rows[-1]), flush=True)
    if args.gpu:
        columns = [Column("batch, precision, steps"), Column("tokens/s", ",.0f"), Column("vs first row", ".2f"),
                   Column("model TFLOP/s", ".2f"), Column("peak GPU memory, GiB", ".2f"),
                   Column("first 3 steps, s", ".1f")]
        notes = f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}; {label}, {args.steps} timed steps"
    else:
        columns = [Column("model"), Column("parameters", ",.0f"), Column("tokens/s", ",.0f"),
                   Column("vs first row", ".2f"), Column("first 3 steps, s", ".1f")]
        notes = f"device {device}, batch {args.batch_size} x {args.seq_len} tokens, {args.steps} timed steps"
    name = "throughput-gpu" if args.gpu else "throughput-compile" if args.compile else "throughput"
    write_result(name, columns, rows, seconds=time.perf_counter() - start,
                 notes=notes + ("; an empty compile cache" if own_cache else ""))


if __name__ == "__main__":
    main()
