"""Our training loops against the original course's, side by side, in tokens per second.

The course's loop is re-created here as its notebook wrote it: a sequence-first
`nn.TransformerEncoder` (layout `base.encoder`, `base.pos_encoder`, `base.transformer_encoder`,
`classifier.decoder`, the names `checkpoint_import.py` reads), a float `-inf` square mask,
fp32, plain Adam, the language model fed `bptt`-long slices of a batchified stream, the
classifier fed random batches padded to their longest text, and a Python loop over the batch
that searches each text's last non-padding token. Ours is the pipeline's own code
(`pretrain.pretrain`, `finetune.finetune`) with its default params, in a process that flushes denormals
as the pipeline's stages do; `--flushed-course` adds the course's loop with them flushed too.

Same shape for both: D = 200, 4 layers, 2 heads, F = 200, dropout 0.1; pretraining batch 32 x 64;
fine-tuning batch 32 over texts of log-normal lengths (median 55 tokens, up to 256), counting real
(non-padding) tokens. Each loop runs in a process of its own for each kernel setting (pinned AVX2,
the default; native), the loops alternate over the rounds, and the median of the rounds is printed.

    python benchmarks/course_loop.py                 # everything, 3 rounds (2 rounds with --flushed-course: 14 min)
    python benchmarks/course_loop.py --quick         # fewer steps and rounds
    python benchmarks/course_loop.py --kernels pinned --workloads pretrain-4000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

from results_file import Column, write_result

D_MODEL, N_LAYERS, N_HEADS, D_FF, DROPOUT = 200, 4, 2, 200, 0.1
BATCH, SEQ_LEN, MAX_TEXT = 32, 64, 256
PAD, BOS, EOS = 0, 2, 3
WORKLOADS = {  # name: (kind, vocabulary)
    "pretrain-4000": ("pretrain", 4000),
    "pretrain-50001": ("pretrain", 50_001),
    "finetune-4000": ("finetune", 4000),
    "finetune-50001": ("finetune", 50_001),
}
KERNELS = {"pinned": {}, "native": {"LMTRANSFER_CPU_KERNELS": "native"}}


# --- the course's model and loops (runs inside the measuring process) -----------------------------------


def course_model(vocab_size: int, n_outputs: int):
    """The course's network: `base` (embedding, positions, seq-first encoder) and `classifier.decoder`."""
    import torch
    from torch import nn

    class PositionalEncoding(nn.Module):
        def __init__(self, d_model: int, dropout: float, max_len: int = 5000):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
            pe = torch.zeros(max_len, d_model)
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))  # (max_len, 1, D)

        def forward(self, x):
            return self.dropout(x + self.pe[: x.size(0), :])

    class Base(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_mask = None
            self.pos_encoder = PositionalEncoding(D_MODEL, DROPOUT)
            layer = nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, DROPOUT)  # sequence-first
            self.transformer_encoder = nn.TransformerEncoder(layer, N_LAYERS, enable_nested_tensor=False)
            self.encoder = nn.Embedding(vocab_size, D_MODEL)

        @staticmethod
        def square_subsequent_mask(size: int):
            mask = (torch.triu(torch.ones(size, size)) == 1).transpose(0, 1)
            return mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, 0.0)

        def forward(self, src):  # (T, B)
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self.square_subsequent_mask(len(src))
            src = self.pos_encoder(self.encoder(src) * math.sqrt(D_MODEL))
            return self.transformer_encoder(src, self.src_mask)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.decoder = nn.Linear(D_MODEL, n_outputs)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.base, self.classifier = Base(), Classifier()

    return Model()


def course_pretrain_seconds(stream, vocab_size: int, warmup: int, steps: int) -> float:
    """The course's LM loop: batchify into BATCH columns, bptt slices, Adam, clip 0.5; seconds for `steps`."""
    import torch
    from torch import nn

    model = course_model(vocab_size, vocab_size)
    model.train()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    data = torch.from_numpy(stream.astype("int64"))
    n_columns = data.size(0) // BATCH
    data = data[: n_columns * BATCH].view(BATCH, -1).t().contiguous()  # (rows, BATCH): batchify
    start = 0
    for step, i in enumerate(range(0, data.size(0) - 1, SEQ_LEN)):
        if step == warmup:
            start = time.perf_counter()
        if step == warmup + steps:
            return time.perf_counter() - start
        seq_len = min(SEQ_LEN, len(data) - 1 - i)
        source, targets = data[i : i + seq_len], data[i + 1 : i + 1 + seq_len].reshape(-1)
        optimizer.zero_grad()
        output = model.classifier.decoder(model.base(source))
        loss = criterion(output.view(-1, vocab_size), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
    raise ValueError("stream too short for the steps asked")


def course_last_vectors(output, batch, pad: int = PAD):
    """The course's pooling: for each text (a column of the (T, B) batch), a search for its last non-padding token."""
    import torch

    last_vectors = []
    for column in range(batch.size(1)):
        last = (batch[:, column] != pad).nonzero()[-1].item()
        last_vectors.append(output[last, column])
    return torch.stack(last_vectors)


def course_classifier_epoch(model, optimizer, texts, labels, generator, batch_size: int = BATCH,
                            clip: float = 0.5, pad: int = PAD) -> tuple[float, float]:
    """One epoch of the course's classifier loop: random batches padded to the longest, the last-token search,
    cross-entropy, clipped Adam steps. Returns the epoch's mean loss and accuracy."""
    import torch
    from torch import nn
    from torch.nn.utils.rnn import pad_sequence

    criterion = nn.CrossEntropyLoss()
    model.train()
    order = generator.permutation(len(texts))
    loss_sum, correct = 0.0, 0
    for begin in range(0, len(order), batch_size):
        chosen = order[begin : begin + batch_size]
        batch = pad_sequence([torch.from_numpy(texts[i].astype("int64")) for i in chosen], padding_value=pad)
        target = torch.from_numpy(labels[chosen])
        optimizer.zero_grad()
        logits = model.classifier.decoder(course_last_vectors(model.base(batch), batch, pad))  # base: (T, B, D)
        loss = criterion(logits, target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        loss_sum += loss.item() * len(chosen)
        correct += int((logits.argmax(-1) == target).sum())
    return loss_sum / len(order), correct / len(order)


def course_finetune_seconds(texts, labels, vocab_size: int, epochs: int) -> float:
    """The course's classifier loop (`course_classifier_epoch`), Adam 3e-4; seconds of the last epoch."""
    import numpy as np
    import torch

    model = course_model(vocab_size, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    generator = np.random.default_rng(0)
    seconds = 0.0
    for _ in range(epochs):
        start = time.perf_counter()
        course_classifier_epoch(model, optimizer, texts, labels, generator)
        seconds = time.perf_counter() - start
    return seconds


# --- ours ----------------------------------------------------------------------------------------------


def our_pretrain_seconds(stream, vocab_size: int, warmup: int, steps: int) -> float:
    """`pretrain.pretrain` with the default params; the seconds of its steps after the first `warmup`."""

    from lmtransfer.core.config import PretrainParams
    from lmtransfer.modeling.model import LanguageModel, ModelConfig
    from lmtransfer.pretraining.training import pretrain
    from lmtransfer.training.loop import RunOptions

    model = LanguageModel(ModelConfig(vocab_size, D_MODEL, N_LAYERS, N_HEADS, D_FF, DROPOUT))
    params = PretrainParams(max_steps=warmup + steps, batch_size=BATCH, seq_len=SEQ_LEN, eval_every=10**6,
                            eval_batches=1)
    result = pretrain(model, stream, stream[: 4 * SEQ_LEN], params, RunOptions(log_every=warmup))
    seconds, done = 0.0, warmup  # the logged windows after the first: (steps in it) x batch / its tokens/s
    for row in result.throughput[1:]:
        seconds += (row["step"] - done) * BATCH * SEQ_LEN / row["tokens_per_s"]
        done = row["step"]
    return seconds


def our_finetune_seconds(texts, labels, vocab_size: int, epochs: int) -> float:
    """`finetune.finetune` with the default recipe (last-token pooling, as the course); the last epoch's seconds."""
    import numpy as np

    from lmtransfer.classification.config import FinetuneParams
    from lmtransfer.classification.finetune import finetune
    from lmtransfer.modeling.model import Classifier, ModelConfig
    from lmtransfer.tokens.id_files import LabeledSplit

    def split(rows):
        lengths = np.array([len(texts[i]) for i in rows])
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        ids = np.concatenate([texts[i] for i in rows]).astype(np.uint16 if vocab_size < 65536 else np.uint32)
        return LabeledSplit(ids, offsets, labels[rows])

    config = ModelConfig(vocab_size, D_MODEL, N_LAYERS, N_HEADS, D_FF, DROPOUT)
    model = Classifier(config, 2, pooling="last")
    params = FinetuneParams(epochs=epochs, batch_size=BATCH, max_len=MAX_TEXT, pooling="last")
    result = finetune(model, split(np.arange(len(texts))), split(np.arange(2)), params)
    return result.epoch_seconds[-1]


# --- the measuring process -----------------------------------------------------------------------------


def synthetic_texts(vocab_size: int, n_texts: int):
    """Token ids of log-normal lengths (median 55, capped at MAX_TEXT), each BOS ... EOS, and 0/1 labels."""
    import numpy as np

    generator = np.random.default_rng(1)
    lengths = np.clip(np.exp(generator.normal(math.log(55), 0.8, n_texts)).astype(int), 4, MAX_TEXT)
    texts = [np.concatenate([[BOS], generator.integers(5, vocab_size, n - 2), [EOS]]) for n in lengths]
    return texts, generator.integers(0, 2, n_texts)


def sgemm_gflops() -> float:
    """This process's practical fp32 peak: a large matrix product on all threads."""
    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    start, repeats = time.perf_counter(), 5
    for _ in range(repeats):
        a @ b
    return 2 * 2048**3 * repeats / (time.perf_counter() - start) / 1e9


def training_flops_per_token(vocab_size: int, with_head: bool, context: int) -> float:
    """6 x (weights a token multiplies) + attention's 12 x layers x context x D: forward and backward."""
    per_layer = 4 * D_MODEL * D_MODEL + 2 * D_MODEL * D_FF
    weights = N_LAYERS * per_layer + (vocab_size * D_MODEL if with_head else 0)
    return 6 * weights + 12 * N_LAYERS * context * D_MODEL


COURSE = {"pretrain": course_pretrain_seconds, "finetune": course_finetune_seconds}
OURS = {"pretrain": our_pretrain_seconds, "finetune": our_finetune_seconds}
LOOPS = {"course": (COURSE, False), "ours": (OURS, True), "course+flush": (COURSE, True)}  # (functions, flush first)


def measure(loop: str, workloads: list[str], quick: bool) -> dict:
    """One loop over the workloads, in this process: tokens/s each, and this process's sgemm rate. Ours flushes
    denormals as the pipeline's stages do (`runtime.configure`), before torch starts its threads."""
    import numpy as np
    import torch

    import lmtransfer  # noqa: F401 - pins the kernels unless LMTRANSFER_CPU_KERNELS=native
    from lmtransfer.modeling.runtime import flush_denormals

    functions, flush = LOOPS[loop]
    if flush:
        flush_denormals()
    results: dict = {"kernels": torch.backends.cpu.get_cpu_capability(), "sgemm_gflops": sgemm_gflops()}
    for name in workloads:
        kind, vocab = WORKLOADS[name]
        torch.manual_seed(0)
        if kind == "pretrain":
            warmup, steps = (2, 3) if quick else (2, 6) if vocab > 10_000 else (3, 12)  # 6 x 1-2 s at V = 50,001
            stream = np.random.default_rng(0).integers(5, vocab, (warmup + steps + 2) * BATCH * SEQ_LEN * 2)
            stream = stream.astype(np.uint16 if vocab < 65536 else np.uint32)
            results[name] = steps * BATCH * SEQ_LEN / functions[kind](stream, vocab, warmup, steps)
        else:
            texts, labels = synthetic_texts(vocab, 256 if quick else 640)
            results[name] = sum(len(t) for t in texts) / functions[kind](texts, labels, vocab, 2)
        print(f"  {loop} {name}: {results[name]:,.0f} tokens/s", file=sys.stderr, flush=True)
    return results


def flops_per_token(workload: str) -> float:
    kind, vocab = WORKLOADS[workload]
    return training_flops_per_token(vocab, True, SEQ_LEN) if kind == "pretrain" else training_flops_per_token(0, False, 55)


def run_loop(setting: str, loop: str, workloads: list[str], quick: bool) -> dict:
    """`measure` in a fresh process with the kernel setting's variables (kernels are chosen when torch loads)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
    env.update(KERNELS[setting], TQDM_DISABLE="1")
    command = [sys.executable, __file__, "--measure", loop, "--workloads", *workloads] + (["--quick"] if quick else [])
    out = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", choices=[*KERNELS, "both"], default="both")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="fewer steps and texts, one round")
    parser.add_argument("--flushed-course", action="store_true",
                        help="also the course's loop with denormals flushed: how much of the gap that is")
    parser.add_argument("--measure", choices=list(LOOPS), help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    if args.measure:
        with contextlib.redirect_stdout(sys.stderr):  # the loops' own log lines; stdout carries the JSON
            measured = measure(args.measure, args.workloads, args.quick)
        print(json.dumps(measured))
        return
    settings = list(KERNELS) if args.kernels == "both" else [args.kernels]
    loops = ["course", "ours"] + (["course+flush"] if args.flushed_course else [])
    print(f"batch {BATCH} x {SEQ_LEN} (pretraining), {BATCH} texts (fine-tuning); D={D_MODEL} N={N_LAYERS} "
          f"A={N_HEADS} F={D_FF}; each loop in its own process, the loops alternating; median of {rounds} "
          f"round(s)", flush=True)
    header = (f"{'kernels':<16}{'workload':<17}{'course tok/s':>13}{'ours tok/s':>12}{'ours/course':>12}"
              f"{'ours GFLOP/s':>14}{'% of sgemm':>11}" + (f"{'course+flush':>14}{'ours/that':>10}"
                                                             if args.flushed_course else ""))
    rows, table = [], []
    start = time.perf_counter()
    for setting in settings:
        print(f"measuring with {setting} kernels ...", flush=True)
        samples = [{loop: run_loop(setting, loop, args.workloads, args.quick) for loop in loops}
                   for _ in range(rounds)]
        median = {loop: {name: statistics.median(sample[loop][name] for sample in samples) for name in args.workloads}
                  for loop in loops}
        sgemm = statistics.median(sample[loop]["sgemm_gflops"] for sample in samples for loop in loops)
        label = f"{setting} ({samples[0]['ours']['kernels']})"
        for name in args.workloads:
            course, ours = median["course"][name], median["ours"][name]
            gflops = ours * flops_per_token(name) / 1e9
            row = (f"{label:<16}{name:<17}{course:>13,.0f}{ours:>12,.0f}{ours / course:>11.2f}x"
                   f"{gflops:>14.1f}{100 * gflops / sgemm:>10.0f}%")
            cells = [label, name, round(course), round(ours), round(ours / course, 2), round(gflops, 1),
                     round(100 * gflops / sgemm)]
            if args.flushed_course:
                flushed = median["course+flush"][name]
                row += f"{flushed:>14,.0f}{ours / flushed:>9.2f}x"
                cells += [round(flushed), round(ours / flushed, 2)]
            rows.append(row)
            table.append(cells)
        rows.append(f"{label:<16}{'sgemm 2048^3':<17}{'':>13}{'':>12}{'':>12}{sgemm:>14.1f}{100:>10.0f}%")
        table.append([label, "sgemm 2048^3", None, None, None, round(sgemm, 1), 100]
                     + ([None, None] if args.flushed_course else []))
    print(header)
    print("\n".join(rows))
    columns = [Column("kernels"), Column("workload"), Column("course tok/s", ",.0f"), Column("ours tok/s", ",.0f"),
               Column("ours/course", ".2f"), Column("ours GFLOP/s", ".1f"), Column("% of sgemm", ".0f")]
    if args.flushed_course:
        columns += [Column("course+flush tok/s", ",.0f"), Column("ours/that", ".2f")]
    write_result("course_loop" + ("-quick" if args.quick else ""), columns, table,
                 seconds=time.perf_counter() - start,
                 notes=f"median of {rounds} round(s); each loop in its own process, the loops alternating")

if __name__ == "__main__":
    main()
