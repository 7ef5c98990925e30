"""Text from the language model: continuations of a prompt, a cheap and visible check of pretraining.

Used by the pretrain stage (fixed prompts after training) and by `lmtransfer generate`.
"""

from __future__ import annotations

import torch

from .errors import TokenizerError
from .model import LanguageModel


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """BOS + the prompt's ids. Raw text when the tokenizer can cut it; with only a dictionary,
    the prompt is read as pieces (`▁Ce ▁livre`)."""
    try:
        ids = tokenizer.encode(prompt)
    except TokenizerError:
        ids = tokenizer.pieces_to_ids(prompt)
    return [tokenizer.bos_id, *ids]


def continue_prompt(
    model: LanguageModel, tokenizer, prompt: str, max_new_tokens: int, temperature: float, top_k: int,
    generator: torch.Generator, device: torch.device | str = "cpu",
) -> str:
    """The decoded continuation (without the prompt); temperature 0 is greedy, else top-k sampling."""
    model.eval()
    prompt_ids = torch.tensor([encode_prompt(tokenizer, prompt)], device=device)
    out = model.generate(prompt_ids, max_new_tokens, temperature, top_k, eos_id=tokenizer.eos_id, generator=generator)
    return tokenizer.decode(out[0, prompt_ids.size(1) :].tolist())


def generate_samples(
    model: LanguageModel, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float, top_k: int,
    device: torch.device, seed: int = 0,
) -> list[dict[str, str]]:
    """A greedy and a sampled continuation of each prompt (seeded: the same text every run)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    samples = []
    for prompt in prompts:
        for mode, mode_temperature in (("greedy", 0.0), ("sampled", temperature)):
            continuation = continue_prompt(model, tokenizer, prompt, max_new_tokens, mode_temperature, top_k,
                                           generator, device)
            samples.append({"prompt": prompt, "mode": mode, "continuation": continuation})
    return samples


def format_samples(samples: list[dict[str, str]]) -> str:
    """`[greedy] the movie was -> ...`, one line each (metrics/pretrain/samples.txt)."""
    return "\n".join(f"[{s['mode']}] {s['prompt']} -> {s['continuation']}" for s in samples) + "\n"
