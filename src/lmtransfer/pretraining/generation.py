"""Text from the language model, a cheap and visible check of pretraining: continuations of a prompt (causal LM) or
the likeliest words for each `<mask>` (masked LM), for the pretrain stage's samples, `generate` and `fill`."""

from __future__ import annotations

import torch

from lmtransfer.core.errors import TokenizerError
from lmtransfer.modeling.model import LanguageModel
from lmtransfer.tokens.tokenizer import MASK_PIECE
from lmtransfer.tokens.tokenizer import mask_id_of as tokenizer_mask_id

FILL_TOP_K = 5  # predictions shown per blank in the masked LM's samples


def _encode_text(tokenizer, text: str) -> list[int]:
    """Raw text when the tokenizer can cut it; with only a dictionary, the text is read as pieces (`▁Ce ▁livre`)."""
    try:
        return tokenizer.encode(text)
    except TokenizerError:
        return tokenizer.pieces_to_ids(text)


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    return [tokenizer.bos_id, *_encode_text(tokenizer, prompt)]


def mask_id_of(tokenizer) -> int:
    """The `<mask>` id of a tokenizer the pipeline trained (its reserved piece); other tokenizers have none."""
    mask_id = tokenizer_mask_id(tokenizer)
    if mask_id is None:
        raise TokenizerError("this tokenizer has no <mask> token (only the tokenizer the pipeline trains has one)")
    return mask_id


@torch.no_grad()
def fill_blanks(
    model: LanguageModel, tokenizer, prompt: str, mask_id: int, top_k: int = 5, device: torch.device | str = "cpu",
) -> list[list[tuple[str, float]]]:
    """For each `<mask>` of the prompt (one appended if none), the `top_k` likeliest words (never a special id)."""
    if MASK_PIECE not in prompt:
        prompt = f"{prompt} {MASK_PIECE}"
    ids = [tokenizer.bos_id]  # each `<mask>` as the mask id (cut apart, sentencepiece would spell it out)
    parts = prompt.split(MASK_PIECE)
    for index, part in enumerate(parts):
        if part.strip():
            ids += _encode_text(tokenizer, part.strip())
        if index < len(parts) - 1:
            ids.append(mask_id)
    model.eval()
    logits = model(torch.tensor([ids], device=device))[0].float()
    specials = [i for i in {*tokenizer.special_ids().values(), mask_id} if 0 <= i < logits.size(-1)]
    logits[:, specials] = float("-inf")
    blanks = []
    for position in (i for i, token in enumerate(ids) if token == mask_id):
        probabilities = torch.softmax(logits[position], dim=-1)
        top = torch.topk(probabilities, min(top_k, probabilities.numel()))
        blanks.append([(tokenizer.decode([int(i)]) or f"<{int(i)}>", float(p)) for p, i in zip(top.values, top.indices)])
    return blanks


def continue_prompt(
    model: LanguageModel, tokenizer, prompt: str, max_new_tokens: int, temperature: float, top_k: int,
    generator: torch.Generator, device: torch.device | str = "cpu",
) -> str:
    """The decoded continuation (without the prompt); temperature 0 is greedy, else top-k sampling."""
    model.eval()
    prompt_ids = torch.tensor([encode_prompt(tokenizer, prompt)], device=device)
    out = model.generate(prompt_ids, max_new_tokens, temperature, top_k, eos_id=tokenizer.eos_id, generator=generator)
    return tokenizer.decode(out[0, prompt_ids.size(1) :].tolist())


def pretraining_samples(
    model: LanguageModel, tokenizer, params, objective: str, mask_id: int | None, device: torch.device, seed: int,
) -> str:
    """samples.txt: each of `pretrain.prompts` continued greedily and sampled (`[greedy] the movie was -> ...`), or
    its blanks filled by a masked LM (`[fill] the movie was <mask> -> good 0.210 | great 0.104 | ...`)."""
    lines = []
    if objective == "mlm":
        for prompt in params.prompts:
            shown = prompt if MASK_PIECE in prompt else f"{prompt} {MASK_PIECE}"
            for number, blank in enumerate(fill_blanks(model, tokenizer, prompt, mask_id, FILL_TOP_K, device), 1):
                which = f" (blank {number})" if shown.count(MASK_PIECE) > 1 else ""
                lines.append(f"[fill] {shown}{which} -> " + " | ".join(f"{word} {p:.3f}" for word, p in blank))
        return "\n".join(lines) + "\n"
    generator = torch.Generator(device=device).manual_seed(seed)
    for prompt in params.prompts:
        for mode, temperature in (("greedy", 0.0), ("sampled", params.temperature)):
            continuation = continue_prompt(model, tokenizer, prompt, params.generate_tokens, temperature, params.top_k,
                                           generator, device)
            lines.append(f"[{mode}] {prompt} -> {continuation}")
    return "\n".join(lines) + "\n"
