"""A training's speed alone and beside two programs that do not yield (`yes > /dev/null`, started in a session of
their own, as from another terminal), and the ratio: the guarantee is 0.40 or more (libgomp's default spin kept
0.19-0.27). Each measurement is a fresh process, which chooses how OpenMP's threads wait as it imports lmtransfer
(`lmtransfer.choose_openmp_wait`), then times AdamW steps of the pipeline's model shape on random ids.

    python benchmarks/fair_share.py                        # 3 rounds, alone and beside alternating (minutes)
    python benchmarks/fair_share.py --rounds 1 --steps 3 --d-model 32 --no-record   # does it run?
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

from results_file import Column, pipeline_shape, write_result

TRAIN = """
import json, os, sys, time
import lmtransfer  # first: it sets the OpenMP wait before torch loads OpenMP
import torch
from lmtransfer.modeling.model import LanguageModel, ModelConfig
from lmtransfer.modeling.runtime import seed_everything, use_share_of_cores
steps, batch, length, d_model, layers, vocab, heads, d_ff = map(int, sys.argv[1:])
seed_everything(0)
use_share_of_cores()
model = LanguageModel(ModelConfig(vocab_size=vocab, d_model=d_model, n_layers=layers, n_heads=heads, d_ff=d_ff,
                                  dropout=0.1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, vocab, (steps + 1, batch, length + 1))
for i in [steps, *range(steps)]:  # the first step allocates: not timed
    if i == 0:
        start = time.perf_counter()
    optimizer.zero_grad()
    model.loss(ids[i, :, :-1], ids[i, :, 1:]).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()
wait = " ".join(f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ)
print(json.dumps({"tokens_per_s": steps * batch * length / (time.perf_counter() - start), "wait": wait}))
"""


def train(args: argparse.Namespace, hogs: int = 0) -> dict:
    """One measurement in a fresh process, beside `hogs` copies of `yes` started a second before it."""
    yes = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, start_new_session=True) for _ in range(hogs)]
    try:
        time.sleep(1.0 if hogs else 0.0)
        shape = [args.steps, args.batch, args.length, args.d_model, args.layers, args.vocab,
                 *(pipeline_shape()[key] for key in ("n_heads", "d_ff"))]
        done = subprocess.run([sys.executable, "-c", TRAIN, *map(str, shape)], capture_output=True, text=True,
                              check=True)
    finally:
        for hog in yes:
            hog.kill()
            hog.wait()
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    shape = pipeline_shape()
    for name, default in (("rounds", 3), ("steps", 40), ("batch", shape["batch"]), ("length", shape["length"]),
                          ("d-model", shape["d_model"]), ("layers", shape["n_layers"]), ("vocab", shape["vocab"])):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--no-record", action="store_true", help="print only: no benchmarks/results/fair_share.json")
    args = parser.parse_args()
    started, runs = time.perf_counter(), {"alone": [], "beside two yes": []}
    for _ in range(args.rounds):
        runs["alone"].append(train(args))
        runs["beside two yes"].append(train(args, hogs=2))
    speed = {case: statistics.median(run["tokens_per_s"] for run in done) for case, done in runs.items()}
    rows = [[case, speed[case], done[-1]["wait"], speed[case] / speed["alone"]] for case, done in runs.items()]
    for row in rows:
        print(f"{row[0]:>16}: {row[1]:9,.0f} tokens/s  {row[3]:.2f} of alone  ({row[2]})")
    if not args.no_record:
        write_result("fair_share", [Column("case"), Column("tokens/s", ",.0f"), Column("wait"), Column("fraction",
                     ".2f")], rows, seconds=time.perf_counter() - started, notes=f"median of {args.rounds} rounds")


if __name__ == "__main__":
    main()
