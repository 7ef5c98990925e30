"""Fine-tuning the encoder–decoder on sentence pairs: one code path for the warm-started and the scratch model.

Per epoch: length-bucketed batches of pairs (`translation_data.pair_batches`), one
clipped AdamW step each on the label-smoothed cross-entropy of the next target
token; then the validation loss (teacher forcing, every validation pair), the
validation BLEU (greedy translations of the first `finetune.valid_sentences`
pairs) and the example sentences translated, so a user sees the model learn.
The epoch with the best validation BLEU is kept.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from lmtransfer.harness.progress import progress_bar
from lmtransfer.modeling.model import ModelConfig, count_parameters
from lmtransfer.modeling.runtime import autocast, to_device
from lmtransfer.tokens.tokenizer import Tokenizer
from lmtransfer.training.optim import make_optimizer, optimizer_step, warmup_cosine
from lmtransfer.translation.batches import PairSplit, pair_batches, steps_per_epoch, trainable_pairs
from lmtransfer.translation.bleu import corpus_scores
from lmtransfer.translation.config import TranslationFinetuneParams
from lmtransfer.translation.decoding import evaluation_mode
from lmtransfer.translation.model import TranslationConfig, TranslationModel, WarmStart, warm_start_from_language_model
from lmtransfer.translation.translator import DecodingOptions, translate_sources, translate_texts

EpochCallback = Callable[[dict[str, float], list[str]], None]


@dataclass
class TranslationResult:
    history: list[dict[str, float]] = field(default_factory=list)
    examples: list[list[str]] = field(default_factory=list)  # per epoch, the translations of finetune.examples
    best_epoch: int = 0
    best_val_bleu: float = -1.0
    best_state: dict | None = None
    left_out: int = 0  # training pairs longer than finetune.max_len on a side
    seconds: float = 0.0
    tokens_per_second: float = 0.0


def build_translation_model(lm_config: ModelConfig, params: TranslationFinetuneParams, seed: int,
                            lm_state: dict[str, torch.Tensor] | None) -> tuple[TranslationModel, WarmStart | None]:
    """The encoder–decoder shaped after the pretrained LM (its layers on both sides), from the same seeded random
    init in both variants; with `lm_state`, its tensors are then copied in (cross-attention stays fresh)."""
    config = TranslationConfig.from_language_model(lm_config, tie_output=params.tie_output)
    torch.manual_seed(seed)
    model = TranslationModel(config)
    warm = warm_start_from_language_model(model, lm_state, lm_config) if lm_state is not None else None
    return model, warm


@torch.no_grad()
def validation_loss(model: TranslationModel, split: PairSplit, batch_size: int, device: torch.device) -> float:
    """Mean cross-entropy per target token (no label smoothing) over every validation pair, teacher-forced."""
    total, tokens = 0.0, 0
    indices = np.arange(len(split))
    with evaluation_mode(model):
        for source, target_in, target_out in pair_batches(split, indices, batch_size, model.config.pad_id,
                                                          np.random.default_rng(0)):
            source, target_in, target_out = to_device((source, target_in, target_out), device)
            with autocast(device):
                logits = model(source, target_in).float()
            count = int(target_out.ne(model.config.pad_id).sum())
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), target_out.reshape(-1),
                                                     ignore_index=model.config.pad_id, reduction="sum")
            total, tokens = total + float(loss), tokens + count
    return total / max(tokens, 1)


def finetune_translation(model: TranslationModel, train: PairSplit, valid: PairSplit, valid_references: list[str],
                         tokenizer: Tokenizer, params: TranslationFinetuneParams, device: torch.device, seed: int,
                         on_epoch: EpochCallback | None = None, desc: str = "finetune") -> TranslationResult:
    """Train `params.epochs` epochs (or `params.max_steps` steps); `on_epoch(row, example_translations)` after each
    epoch (MLflow logging)."""
    model.to(device)
    pad = model.config.pad_id
    usable = trainable_pairs(train, params.max_len)
    result = TranslationResult(left_out=len(train) - len(usable))
    optimizer = make_optimizer(model.parameters(), params.lr, params.weight_decay)
    steps = steps_per_epoch(len(usable), params.batch_size)
    total_steps = min(steps * params.epochs, params.max_steps) if params.max_steps else steps * params.epochs
    scheduler = warmup_cosine(optimizer, params.warmup_steps, total_steps)
    generator = np.random.default_rng(seed)
    torch.manual_seed(seed)  # dropout
    greedy = DecodingOptions(beam_size=1, batch_size=params.batch_size)
    n_valid = min(params.valid_sentences, len(valid))
    valid_sources = [valid.source(i) for i in range(n_valid)]
    print(f"{desc}: {count_parameters(model):,} parameters, {len(usable):,} training pairs "
          f"({result.left_out:,} longer than finetune.max_len={params.max_len} left out), {steps} steps per epoch"
          + (f", {total_steps} in all (finetune.max_steps)" if total_steps < steps * params.epochs else ""),
          flush=True)
    epochs = -(-total_steps // steps)  # a step budget inside the first epoch ends training there
    start, tokens, done = time.perf_counter(), 0, 0
    for epoch in range(1, epochs + 1):
        model.train()
        loss_sum, seen = 0.0, 0
        progress = progress_bar(total=min(steps, total_steps - done), desc=f"{desc} epoch {epoch}/{epochs}",
                                unit="batch")
        for source, target_in, target_out in itertools.islice(
                pair_batches(train, usable, params.batch_size, pad, generator), total_steps - done):
            source, target_in, target_out = to_device((source, target_in, target_out), device)
            with autocast(device):
                loss = model.loss(source, target_in, target_out, params.label_smoothing)
            optimizer_step(loss, model, optimizer, scheduler, params.grad_clip)
            count = int(target_out.ne(pad).sum())
            loss_sum, seen = loss_sum + loss.item() * count, seen + count
            tokens += int(source.ne(pad).sum()) + count
            done += 1
            progress.update(1)
            progress.set_postfix(loss=f"{loss_sum / seen:.3f}", refresh=False)
        progress.close()
        hypotheses = translate_sources(model, valid_sources, tokenizer, greedy, device)
        row = {"epoch": epoch, "train_loss": loss_sum / max(seen, 1),
               "val_loss": validation_loss(model, valid, params.batch_size, device),
               "val_bleu": float(corpus_scores(hypotheses, valid_references[:n_valid])["bleu"])}
        examples = translate_texts(model, params.examples, tokenizer, greedy, device) if params.examples else []
        result.history.append(row)
        result.examples.append(examples)
        if row["val_bleu"] > result.best_val_bleu:
            result.best_val_bleu, result.best_epoch = row["val_bleu"], epoch
            result.best_state = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
        print(f"{desc} epoch {epoch}: train loss {row['train_loss']:.4f} | val loss {row['val_loss']:.4f} "
              f"BLEU {row['val_bleu']:.2f} (greedy, {n_valid} pairs)", flush=True)
        for text, translation in zip(params.examples, examples):
            print(f"    {text} -> {translation}", flush=True)
        if on_epoch:
            on_epoch(row, examples)
    result.seconds = time.perf_counter() - start
    result.tokens_per_second = tokens / max(result.seconds, 1e-9)
    return result
