"""Training throughput (tokens/s) of the language model for a few sizes, measured side by side.

Numbers, not pass/fail: machines are noisy, so compare rows of one run, e.g.

    python benchmarks/throughput.py                 # default sizes on the auto-selected device
    python benchmarks/throughput.py --device cpu --steps 20
    python benchmarks/throughput.py --compile        # the reference size eager and under train.compile

Denormals are flushed first, as the pipeline's stages do (`runtime.flush_denormals`). With `--compile`,
inductor compiles into an empty cache of its own (unless TORCHINDUCTOR_CACHE_DIR is set), so the first
steps' seconds include the whole compilation. The table goes to `benchmarks/results/throughput[-compile].json`.
"""

from __future__ import annotations

import argparse
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
                      compile_steps: bool = False) -> tuple[float, float]:
    """Tokens/s over `steps` timed steps, and the seconds of the 3 untimed first ones (compilation, if any)."""
    optimizer = make_optimizer(model.parameters(), 1e-3, 0.0)
    ids = torch.randint(0, model.head.out_features, (batch_size, seq_len + 1), device=device)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    loss_of = compiled(model.loss, compile_steps)

    def step() -> None:
        with autocast(device):
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true",
                        help="the reference size eager and through torch.compile (train.compile), side by side")
    args = parser.parse_args()
    start = time.perf_counter()
    own_cache = args.compile and "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    if own_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
    flush_denormals()
    device = select_device(args.device)
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
