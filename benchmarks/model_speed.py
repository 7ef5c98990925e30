"""Why model.py has its own attention and dropout: training steps of the pipeline's model (params.yaml) with its
layers against the same network on PyTorch's nn.TransformerEncoderLayer and nn.Dropout, side by side, alternating
rounds, median printed. Fine-tuning batches are right-padded, as bucketed batches are; pretraining's are full.

    python benchmarks/model_speed.py                       # a few minutes
    python benchmarks/model_speed.py --rounds 1 --steps 2  # does it run?
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from lmtransfer.modeling.model import Classifier, LanguageModel, ModelConfig, causal_mask

from results_file import Column, pipeline_shape, write_result


class TorchEncoder(nn.Module):
    """PyTorch's layer stack behind model.py's Encoder interface."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        layer = nn.TransformerEncoderLayer(config.d_model, config.n_heads, config.d_ff, config.dropout,
                                           batch_first=True)
        self.stack = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)
        self.causal = config.causal

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        mask = causal_mask(x.size(1), x.device) if self.causal else None
        return self.stack(x, mask=mask, src_key_padding_mask=padding_mask, is_causal=self.causal)


def step_seconds(task: str, layers: str, shape: dict, steps: int) -> float:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=shape["vocab"], d_model=shape["d_model"], n_layers=shape["n_layers"],
                         n_heads=shape["n_heads"], d_ff=shape["d_ff"], dropout=0.1, pad_id=1)
    model = LanguageModel(config) if task == "pretrain" else Classifier(config, 2, pooling="mean")
    if layers == "PyTorch's":
        model.base.layers, model.base.dropout = TorchEncoder(config), nn.Dropout(config.dropout)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch, length = shape["batch"], shape["length"]
    ids = torch.randint(5, config.vocab_size, (batch, length + 1))
    if task == "finetune":  # right padding: lengths from 1/4 of the maximum to all of it
        ids[torch.arange(length + 1) >= torch.randint(length // 4, length + 2, (batch, 1))] = config.pad_id
        labels = torch.randint(0, 2, (batch,))

    def step() -> None:
        if task == "pretrain":
            loss = model.loss(ids[:, :-1], ids[:, 1:])
        else:
            loss = nn.functional.cross_entropy(model(ids), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    args = parser.parse_args()
    shape, started = pipeline_shape(), time.perf_counter()
    rows = []
    for task in ("pretrain", "finetune"):
        seconds: dict[str, list[float]] = {"model.py's": [], "PyTorch's": []}
        for _ in range(args.rounds):
            for layers in seconds:
                seconds[layers].append(step_seconds(task, layers, shape, args.steps))
        ours, theirs = (statistics.median(seconds[layers]) * 1000 for layers in ("model.py's", "PyTorch's"))
        rows.append([f"{task} ({shape['batch']} x {shape['length']})", ours, theirs, theirs / ours])
        print(f"{rows[-1][0]:<22} model.py {ours:7.1f} ms/step  PyTorch's layers {theirs:7.1f} ms/step  "
              f"{theirs / ours:.2f}x", flush=True)
    write_result("model_speed", [Column("training step"), Column("model.py's layers, ms", ".1f"),
                                 Column("nn.TransformerEncoderLayer + nn.Dropout, ms", ".1f"),
                                 Column("speed-up", ".2f")], rows, seconds=time.perf_counter() - started,
                 notes=f"{torch.get_num_threads()} threads; median of {args.rounds} alternating rounds of "
                       f"{args.steps} steps; params.yaml's model (D={shape['d_model']}, N={shape['n_layers']})")


if __name__ == "__main__":
    main()
