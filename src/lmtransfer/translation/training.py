"""The finetune_pretrained / finetune_scratch stages: one loop for the warm-started and the scratch encoder–decoder.
Per epoch: length-bucketed batches, a clipped AdamW step each on the label-smoothed next-token loss, then validation
loss, validation BLEU (greedy) and the examples translated; the epoch with the best validation BLEU is kept."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from lmtransfer.core.paths import PREPARED, TOKENIZED, finetuned_checkpoint
from lmtransfer.harness.progress import progress_bar
from lmtransfer.harness.tracking import log_file, log_metrics, log_run, stage_run
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.modeling.model import ModelConfig, count_parameters
from lmtransfer.modeling.runtime import autocast, configure, environment_facts, to_device
from lmtransfer.tokens.id_files import PairSplit, load_pair_split, read_tokenized_meta
from lmtransfer.tokens.tokenizer import Tokenizer, load_tokenizer, tokenizer_fingerprint
from lmtransfer.training.finetune_start import language_model_start, record_finetuned
from lmtransfer.training.loop import RunOptions, cpu_copy, optimizer_step
from lmtransfer.training.optim import make_optimizer, warmup_cosine
from lmtransfer.training.resume import Snapshots, fingerprint
from lmtransfer.training.stage_args import FinetuneArgs
from lmtransfer.translation import translator
from lmtransfer.translation.config import TranslationFinetuneParams, TranslationParams
from lmtransfer.translation.evaluate import corpus_scores
from lmtransfer.translation.mlflow_model import log_translator
from lmtransfer.translation.model import TranslationConfig, TranslationModel, WarmStart, warm_start_from_language_model
from lmtransfer.translation.prepare_stage import read_pairs


def trainable_pairs(split: PairSplit, max_len: int) -> np.ndarray:
    """The pairs whose two sides fit `max_len` tokens: longer ones are left out, never cut."""
    return np.flatnonzero((split.source_lengths() <= max_len) & (split.target_lengths() <= max_len))


def pair_batches(split: PairSplit, indices: np.ndarray, batch_size: int, pad_id: int,
                 generator: np.random.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(source, target_in, target_out) batches: shuffled pairs sorted by length within windows of 50 batches (little
    padding), then the batches shuffled."""
    order = generator.permutation(indices)
    window = batch_size * 50
    lengths = split.source_lengths() + split.target_lengths()
    batches = []
    for begin in range(0, len(order), window):
        chunk = order[begin: begin + window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i: i + batch_size] for i in range(0, len(chunk), batch_size)]
    for position in generator.permutation(len(batches)):
        chosen = batches[position]
        source = translator.pad_rows([split.source(i) for i in chosen], pad_id)
        target = translator.pad_rows([split.target(i) for i in chosen], pad_id)
        yield source, target[:, :-1], target[:, 1:]  # the decoder reads BOS + target, is scored on target + EOS


def steps_per_epoch(n_pairs: int, batch_size: int) -> int:
    """What `pair_batches` yields (each window rounds its last batch up)."""
    window = batch_size * 50
    full, rest = divmod(n_pairs, window)
    return full * 50 + -(-rest // batch_size)


@dataclass
class TranslationResult:
    history: list[dict[str, float]] = field(default_factory=list)
    examples: list[list[str]] = field(default_factory=list)  # per epoch, the translations of finetune.examples
    best_epoch: int = 0
    best_val_bleu: float = -1.0
    best_state: dict | None = None
    left_out: int = 0  # training pairs longer than finetune.max_len on a side
    tokens: int = 0  # read on both sides, for tokens per second
    seconds: float = 0.0
    tokens_per_second: float = 0.0


def build_translation_model(lm_config: ModelConfig, params: TranslationFinetuneParams, seed: int,
                            lm_state: dict[str, torch.Tensor] | None) -> tuple[TranslationModel, WarmStart | None]:
    """The encoder–decoder shaped after the LM, one seeded init for both variants, then `lm_state` copied in."""
    config = TranslationConfig.from_language_model(lm_config, tie_output=params.tie_output)
    torch.manual_seed(seed)
    model = TranslationModel(config)
    warm = warm_start_from_language_model(model, lm_state, lm_config) if lm_state is not None else None
    return model, warm


@torch.no_grad()
def validation_loss(model: TranslationModel, split: PairSplit, batch_size: int, device: torch.device) -> float:
    """Mean cross-entropy per target token (no label smoothing), teacher-forced."""
    total, tokens = 0.0, 0
    batches = pair_batches(split, np.arange(len(split)), batch_size, model.config.pad_id, np.random.default_rng(0))
    with translator.evaluation_mode(model):
        for batch in batches:
            source, target_in, target_out = to_device(batch, device)
            with autocast(device):
                logits = model(source, target_in).float()
            count = int(target_out.ne(model.config.pad_id).sum())
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), target_out.reshape(-1),
                                                     ignore_index=model.config.pad_id, reduction="sum")
            total, tokens = total + float(loss), tokens + count
    return total / max(tokens, 1)


@dataclass(frozen=True)
class TranslationPairs:
    train: PairSplit
    valid: PairSplit
    valid_references: list[str]
    tokenizer: Tokenizer


def finetune_translation(model: TranslationModel, pairs: TranslationPairs, params: TranslationFinetuneParams,
                         options: RunOptions = RunOptions(desc="finetune")) -> TranslationResult:
    """`finetune.epochs` epochs (or `finetune.max_steps` steps); with snapshots, saved and resumed per epoch."""
    device, pad, tokenizer = options.device, model.config.pad_id, pairs.tokenizer
    model.to(device)
    usable = trainable_pairs(pairs.train, params.max_len)
    optimizer = make_optimizer(model.parameters(), params.lr, params.weight_decay)
    per_epoch = steps_per_epoch(len(usable), params.batch_size)
    steps = min(per_epoch * params.epochs, params.max_steps or per_epoch * params.epochs)
    scheduler = warmup_cosine(optimizer, params.warmup_steps, steps)
    order = np.random.default_rng(options.seed)  # draws each epoch's batches
    torch.manual_seed(options.seed)  # dropout
    greedy = translator.DecodingOptions(beam_size=1, batch_size=params.batch_size)
    n_valid = min(params.valid_sentences, len(pairs.valid))
    valid_sources = [pairs.valid.source(i) for i in range(n_valid)]
    result = TranslationResult(left_out=len(pairs.train) - len(usable))
    print(f"{options.desc}: {count_parameters(model):,} parameters, {len(usable):,} training pairs "
          f"({result.left_out:,} longer than finetune.max_len={params.max_len} left out), {per_epoch} steps per epoch"
          + (f", {steps} in all (finetune.max_steps)" if steps < per_epoch * params.epochs else ""), flush=True)
    saved = options.snapshots.load("epochs", model, optimizer, scheduler) if options.snapshots else None
    if saved:
        result = TranslationResult(**saved["result"])
        order.bit_generator.state = saved["order"]
        print(f"{options.desc}: resumed from the snapshot after epoch {len(result.history)}")
    step, epochs = per_epoch * len(result.history), -(-steps // per_epoch)
    for epoch in range(len(result.history) + 1, epochs + 1):
        started = time.perf_counter()
        model.train()
        loss_sum, seen = 0.0, 0
        batches = pair_batches(pairs.train, usable, params.batch_size, pad, order)
        bar = progress_bar(total=min(per_epoch, steps - step), desc=f"{options.desc} epoch {epoch}/{epochs}",
                           unit="batch")
        for batch in itertools.islice(batches, steps - step):
            source, target_in, target_out = batch = to_device(batch, device)
            with autocast(device):
                loss = model.loss(*batch, params.label_smoothing)
            optimizer_step(loss, model, optimizer, scheduler, params.grad_clip)
            count = int(target_out.ne(pad).sum())
            loss_sum, seen, step = loss_sum + loss.item() * count, seen + count, step + 1
            result.tokens += int(source.ne(pad).sum()) + count
            bar.update()
            bar.set_postfix(loss=f"{loss_sum / seen:.3f}", refresh=False)
        bar.close()
        hypotheses = translator.translate_sources(model, valid_sources, tokenizer, greedy, device)
        row = {"epoch": epoch, "train_loss": loss_sum / max(seen, 1),
               "val_loss": validation_loss(model, pairs.valid, params.batch_size, device),
               "val_bleu": float(corpus_scores(hypotheses, pairs.valid_references[:n_valid])["bleu"])}
        examples = (translator.translate_texts(model, params.examples, tokenizer, greedy, device)
                    if params.examples else [])
        result.history.append(row)
        result.examples.append(examples)
        if row["val_bleu"] > result.best_val_bleu:
            result.best_val_bleu, result.best_epoch, result.best_state = row["val_bleu"], epoch, cpu_copy(model)
        print(f"{options.desc} epoch {epoch}: train loss {row['train_loss']:.4f} | val loss {row['val_loss']:.4f} "
              f"BLEU {row['val_bleu']:.2f} (greedy, {n_valid} pairs)", flush=True)
        for text, translation in zip(params.examples, examples):
            print(f"    {text} -> {translation}", flush=True)
        options.log_metrics({k: v for k, v in row.items() if k != "epoch"}, epoch)
        result.seconds += time.perf_counter() - started
        if options.snapshots:
            options.snapshots.save("epochs", model, optimizer, scheduler, result=asdict(result),
                                   order=order.bit_generator.state)
    result.tokens_per_second = result.tokens / max(result.seconds, 1e-9)
    return result


def run_finetune_stage(params: TranslationParams, args: FinetuneArgs) -> None:
    meta = read_tokenized_meta(TOKENIZED)
    tokenizer = load_tokenizer(TOKENIZED)
    train, valid = load_pair_split(TOKENIZED, "train"), load_pair_split(TOKENIZED, "valid")
    valid_references = list(read_pairs(PREPARED, "valid")["target"])
    start = language_model_start(params, meta, args)
    variant, seed, stage = start.variant, start.seed, start.stage
    if params.train.nproc > 1:
        print(f"{stage}: train.nproc={params.train.nproc} applies to pretraining; translation fine-tuning runs in "
              "one process")
    device = configure(params.train, seed=start.draws)
    lm_state = start.payload["state_dict"] if start.payload else None
    model, warm = build_translation_model(start.config, params.finetune, start.draws, lm_state)
    inputs = [PREPARED, TOKENIZED] + ([start.pretrained] if start.pretrained else [])
    snapshots = Snapshots(stage, fingerprint(stage, params.sections(*start.sections), inputs, device),
                          params.train.resume_every)
    with stage_run(f"finetune_{variant}", start.logged_params(params), upstream_run_id=start.upstream,
                   run_name=stage):
        log_run(tags={"variant": variant, "seed": seed, "pretrain_seed": start.pretrain_seed, "device": str(device),
                      "n_parameters": count_parameters(model)},
                params={"seed": seed, "pretrain_seed": start.pretrain_seed})
        if warm:
            print(f"{stage}: {len(warm.copied)} tensors from the pretrained language model, {len(warm.fresh)} fresh "
                  "(cross-attention and the norm after it)")
            log_file({"copied": warm.copied, "fresh": warm.fresh}, "warm_start.json")

        pairs = TranslationPairs(train, valid, valid_references, tokenizer)
        result = finetune_translation(model, pairs, params.finetune, RunOptions(device, start.draws, stage, snapshots,
                                                                                  log_metrics))
        for epoch, examples in enumerate(result.examples, 1):
            lines = [f"{text}\t{translation}" for text, translation in zip(params.finetune.examples, examples)]
            log_file("\n".join(lines) + "\n", f"examples/epoch{epoch}.txt")
        model.load_state_dict(result.best_state)
        checkpoint = finetuned_checkpoint(variant, start.run)
        save_checkpoint(checkpoint, model, "translation", model.config, variant=variant, seed=seed,
                        pretrain_seed=start.pretrain_seed,
                        tokenizer_sha256=tokenizer_fingerprint(TOKENIZED))
        summary = {"best_val_bleu": result.best_val_bleu, "best_epoch": result.best_epoch,
                   "first_epoch_val_bleu": result.history[0]["val_bleu"],
                   "final_val_loss": result.history[-1]["val_loss"], "pairs_left_out": result.left_out,
                   **environment_facts()}
        record_finetuned(start, checkpoint, result.history, summary,
                         {"seconds": round(result.seconds, 2), "tokens_per_second": round(result.tokens_per_second)},
                         log_model=lambda path: log_translator(path, TOKENIZED))
    snapshots.clear()
    print(f"{stage}: best validation BLEU {result.best_val_bleu:.2f} at epoch {result.best_epoch} -> {checkpoint} "
          f"({result.tokens_per_second:,.0f} tokens/s)")
