"""The language-model head and its cross-entropy in one pass, a few hundred positions at a time.

With a large vocabulary (the course's V = 50,001) the logits of one batch are the biggest
tensor of the step: 32 x 64 positions x 50,001 ids = 410 MB of fp32, written by the head,
read and rewritten by log-softmax, again by its backward, and once more for the head's
weight gradient. Here each chunk of positions goes through head, softmax and gradient while
its logits are still in cache, and only the loss and the gradients are kept: the same exact
softmax over the full vocabulary, computed in a different order (so the last bits of the
result differ from the one-matrix path, which stays the default for the smallest vocabularies).

The gradients are computed in the forward pass (the loss is a mean, so its gradient is known
up to the scalar that backward multiplies in); evaluation without gradients skips them.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

IGNORE_INDEX = -100  # a target that is not scored (cross_entropy's default ignore_index)
CHUNK_LOGITS = 2**23  # logits per chunk at most (32 MB of fp32): 128 positions at V = 50,001 (measured faster
# than 64 or 256), the whole 2,048-position batch at V = 4,000 (faster than 512 or 1,024)
AUTO_MIN_VOCAB = 2_000  # `auto` chunks from this vocabulary size on: a step 3% faster at V = 2,000, 10% at 4,000


def use_chunked_loss(setting: str, vocab_size: int) -> bool:
    """`pretrain.chunked_loss`: on, off, or auto (on for vocabularies of AUTO_MIN_VOCAB ids and more)."""
    return setting == "on" or (setting == "auto" and vocab_size >= AUTO_MIN_VOCAB)


def chunk_tokens_for(vocab_size: int) -> int:
    """Positions per chunk: the largest power of two whose logits fit in CHUNK_LOGITS."""
    return 1 << max(0, (CHUNK_LOGITS // vocab_size).bit_length() - 1)


def _logits_buffer(hidden: torch.Tensor, weight: torch.Tensor, chunk_tokens: int) -> torch.Tensor:
    """One allocation for every chunk's logits: a fresh 26 MB would be fresh pages for the kernel to map, each
    chunk."""
    return hidden.new_empty(min(chunk_tokens, hidden.size(0)), weight.size(0))


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  buffer: torch.Tensor) -> torch.Tensor:
    """hidden @ W^T + b into the buffer's first rows; the bias added in place (`addmm` would first copy it into
    every row, one more pass over the logits)."""
    logits = torch.mm(hidden, weight.t(), out=buffer[: hidden.size(0)])
    return logits.add_(bias) if bias is not None else logits


class _LinearCrossEntropy(torch.autograd.Function):
    """mean over scored positions of -log softmax(hidden @ W^T + b)[target]; gradients made chunk by chunk.

    Each pass over a chunk's logits (26 MB at V = 50,001) costs as much as a fifth of its matrix product, so
    they are few and light: the chunks share one buffer, the bias is added in place (`_chunk_logits`), and the
    softmax is PyTorch's, in place, row by row while a row (200 KB) is still in the core's cache."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, chunk_tokens):  # noqa: D401 - autograd signature
        scored = targets.ne(IGNORE_INDEX)
        all_scored = bool(scored.all())
        scale = 1.0 / max(1, int(scored.sum()))  # the loss is a mean over scored positions
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.empty_like(weight)  # the first chunk's product overwrites it (beta = 0)
        grad_bias = torch.zeros_like(bias) if bias is not None else None
        log_probs = hidden.new_empty(hidden.size(0))  # log softmax at each position's target
        buffer = _logits_buffer(hidden, weight, chunk_tokens)
        for start in range(0, hidden.size(0), chunk_tokens):
            h = hidden[start : start + chunk_tokens]
            target = targets[start : start + chunk_tokens].clamp(min=0)
            rows = torch.arange(h.size(0), device=h.device)
            probs = _chunk_logits(h, weight, bias, buffer)
            torch.softmax(probs, dim=1, out=probs)
            torch.log(probs[rows, target], out=log_probs[start : start + chunk_tokens])
            grad_logits = probs  # softmax - one-hot: d loss / d logits, up to the mean's scale
            grad_logits[rows, target] -= 1.0
            if not all_scored:
                grad_logits[~scored[start : start + chunk_tokens]] = 0.0
            grad_hidden[start : start + chunk_tokens] = torch.mm(grad_logits, weight).mul_(scale)
            grad_weight.addmm_(grad_logits.t(), h, beta=0.0 if start == 0 else 1.0, alpha=scale)
            if grad_bias is not None:
                grad_bias.add_(grad_logits.sum(dim=0), alpha=scale)
        _mend_underflow(log_probs, scored, hidden, weight, bias, targets)
        total = -(log_probs.sum() if all_scored else log_probs[scored].sum())
        ctx.save_for_backward(grad_hidden, grad_weight, *(() if grad_bias is None else (grad_bias,)))
        return total * scale

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight, *grad_bias = ctx.saved_tensors  # ours alone, used once: scaled in place
        if grad_loss.device.type != "cpu" or grad_loss.item() != 1.0:  # a plain loss.backward() skips 80 MB of passes
            for grad in (grad_hidden, grad_weight, *grad_bias):
                grad.mul_(grad_loss)
        return grad_hidden, grad_weight, grad_bias[0] if grad_bias else None, None, None


def _mend_underflow(log_probs: torch.Tensor, scored: torch.Tensor, hidden, weight, bias, targets) -> None:
    """Where a target's probability underflowed to 0 (its logit some 87 below its row's largest), the exact log
    softmax from that position's logits computed again: a confident mistake costs its true loss, not infinity.
    One check per batch, not per chunk (on a GPU each is a wait for the device)."""
    lost = (torch.isinf(log_probs) & scored).nonzero().flatten()
    if len(lost):
        logits = F.linear(hidden[lost], weight, bias)
        log_probs[lost] = logits.gather(1, targets[lost, None]).squeeze(1) - logits.logsumexp(dim=1)


@torch.no_grad()
def _chunked_loss_only(hidden, weight, bias, targets, chunk_tokens) -> torch.Tensor:
    total, count = hidden.new_zeros(()), max(1, int(targets.ne(IGNORE_INDEX).sum()))
    buffer = _logits_buffer(hidden, weight, chunk_tokens)
    for start in range(0, hidden.size(0), chunk_tokens):
        logits = _chunk_logits(hidden[start : start + chunk_tokens], weight, bias, buffer)
        total += F.cross_entropy(logits, targets[start : start + chunk_tokens], reduction="sum")
    return total / count


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
    chunk_tokens: int | None = None,
) -> torch.Tensor:
    """cross_entropy(hidden @ weight^T + bias, targets), mean over targets != IGNORE_INDEX, without the full logits.

    hidden (..., D), targets (...). Computed in fp32 (autocast off): the softmax over a large vocabulary is where
    low precision hurts most.
    """
    hidden, targets = hidden.reshape(-1, hidden.size(-1)), targets.reshape(-1)
    chunk_tokens = chunk_tokens or chunk_tokens_for(weight.size(0))
    with torch.autocast(hidden.device.type, enabled=False):
        hidden = hidden.float()
        if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
            return _chunked_loss_only(hidden, weight, bias, targets, chunk_tokens)
        return _LinearCrossEntropy.apply(hidden, weight, bias, targets, chunk_tokens)
