"""What pinning the CPU kernels to AVX2 costs (docs/guide/reproducibility.md): training tokens/s pinned, native
(LMTRANSFER_CPU_KERNELS=native), and pinned with MKL's vendor-neutral branch (MKL_CBWR=COMPATIBLE). Kernels are
chosen when torch loads, so each setting runs in its own process; the settings alternate, the median is printed.

    python benchmarks/cpu_kernels.py                         # pretraining and fine-tuning steps, params.yaml's model
    python benchmarks/cpu_kernels.py --rounds 1 --steps 2    # does it run?
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from results_file import Column, pipeline_shape, write_result

MEASURE = r"""
import json, sys, time, torch
from lmtransfer.modeling.model import Classifier, LanguageModel, ModelConfig
from lmtransfer.training.optim import make_optimizer
torch.manual_seed(0)
shape = json.loads(sys.argv[2])  # params.yaml's model and pretraining batch
config = ModelConfig(vocab_size=shape["vocab"], d_model=shape["d_model"], n_layers=shape["n_layers"],
                     n_heads=shape["n_heads"], d_ff=shape["d_ff"], dropout=0.1)
batch, length = shape["batch"], shape["length"]
results = {"capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
for name, model, shape in ((f"pretrain ({batch} x {length}, LM head)", LanguageModel(config), (batch, length + 1)),
                           (f"fine-tune ({batch} x 40, classifier)", Classifier(config, 2), (batch, 40))):
    optimizer = make_optimizer(model.parameters(), 1e-4, 0.0)
    ids = torch.randint(5, config.vocab_size, shape)
    labels = torch.randint(0, 2, (shape[0],))
    def step():
        if isinstance(model, LanguageModel):
            loss = model.loss(ids[:, :-1], ids[:, 1:])
        else:
            loss = torch.nn.functional.cross_entropy(model(ids), labels)
        optimizer.zero_grad(); loss.backward(); optimizer.step()
    for _ in range(3):
        step()
    start, steps = time.perf_counter(), int(sys.argv[1])
    for _ in range(steps):
        step()
    tokens = steps * shape[0] * (shape[1] - 1 if isinstance(model, LanguageModel) else shape[1])
    results[name] = tokens / (time.perf_counter() - start)
print(json.dumps(results))
"""
SETTINGS = {"pinned (AVX2, the default)": {}, "native (LMTRANSFER_CPU_KERNELS=native)": {"LMTRANSFER_CPU_KERNELS": "native"},
            "pinned, MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"}}


def run(extra_env: dict[str, str], steps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    env.update(extra_env)
    out = subprocess.run([sys.executable, "-c", MEASURE, str(steps), json.dumps(pipeline_shape())], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=25, help="timed steps per workload")
    args = parser.parse_args()
    rounds, start = args.rounds, time.perf_counter()
    samples: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for _ in range(rounds):
        for name, env in SETTINGS.items():
            samples[name].append(run(env, args.steps))
    pinned, native, compatible = (samples[name] for name in SETTINGS)
    workloads = [k for k in pinned[0] if k not in ("capability", "threads")]
    print(f"kernels: pinned -> {pinned[0]['capability']}, native -> {native[0]['capability']}; "
          f"{pinned[0]['threads']} threads; median of {rounds} alternating rounds")
    print(f"{'workload':<45}{'pinned tok/s':>14}{'native tok/s':>14}{'COMPATIBLE tok/s':>18}{'pinned/native':>15}"
          f"{'COMPATIBLE/pinned':>19}")
    rows = []
    for workload in workloads:
        a, b, c = (statistics.median(s[workload] for s in runs) for runs in (pinned, native, compatible))
        print(f"{workload:<45}{a:>14,.0f}{b:>14,.0f}{c:>18,.0f}{a / b:>15.2f}{c / a:>19.2f}")
        rows.append([workload, round(a), round(b), round(c), round(a / b, 2), round(c / a, 2)])
    write_result("cpu_kernels", [Column("workload"), Column(f"pinned ({pinned[0]['capability']}) tok/s", ",.0f"),
                                 Column(f"native ({native[0]['capability']}) tok/s", ",.0f"),
                                 Column("pinned + MKL_CBWR=COMPATIBLE tok/s", ",.0f"),
                                 Column("pinned/native", ".2f"), Column("COMPATIBLE/pinned", ".2f")], rows,
                 seconds=time.perf_counter() - start,
                 notes=f"{pinned[0]['threads']} threads; median of {rounds} alternating rounds")


if __name__ == "__main__":
    main()
