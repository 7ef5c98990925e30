"""Text in, text out: tokenize sentences, decode them in length-sorted batches, detokenize in the original order.

Shared by the per-epoch validation BLEU and example translations, the evaluate stage
and `lmtransfer translate`, so all three translate the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from lmtransfer.harness.progress import progress_bar
from lmtransfer.modeling.checkpoint import load_checkpoint
from lmtransfer.modeling.runtime import autocast
from lmtransfer.tokens.tokenizer import Tokenizer
from lmtransfer.translation.batches import pad_rows
from lmtransfer.translation.decoding import translate_ids
from lmtransfer.translation.model import TranslationConfig, TranslationModel


@dataclass(frozen=True)
class DecodingOptions:
    beam_size: int = 1
    length_penalty: float = 0.6
    max_length_ratio: float = 1.5
    max_length_extra: int = 10
    batch_size: int = 64

    def max_output(self, source_tokens: int) -> int:
        """Tokens a translation may take before it is stopped (EOS included)."""
        return int(self.max_length_ratio * source_tokens) + self.max_length_extra


def translate_sources(model: TranslationModel, sources: Sequence[np.ndarray], tokenizer: Tokenizer,
                      options: DecodingOptions, device: torch.device, desc: str = "") -> list[str]:
    """Framed source ids (BOS + pieces + EOS) -> detokenized translations, in the order given."""
    order = np.argsort([len(s) for s in sources], kind="stable")
    out: list[str] = [""] * len(sources)
    progress = progress_bar(total=len(sources), desc=desc, unit=" sentences", disable=not desc)
    for begin in range(0, len(order), options.batch_size):
        chosen = order[begin: begin + options.batch_size]
        batch = pad_rows([sources[i] for i in chosen], model.config.pad_id).to(device)
        with autocast(device):
            ids = translate_ids(model, batch, tokenizer.bos_id, tokenizer.eos_id,
                                options.max_output(batch.size(1)), options.beam_size, options.length_penalty)
        for index, tokens in zip(chosen, ids):
            out[index] = tokenizer.decode(tokens)
        progress.update(len(chosen))
    progress.close()
    return out


def translate_texts(model: TranslationModel, texts: Sequence[str], tokenizer: Tokenizer, options: DecodingOptions,
                    device: torch.device, desc: str = "") -> list[str]:
    """Plain sentences -> translations: each framed BOS + pieces + EOS, as the encoder was trained."""
    sources = [np.array([tokenizer.bos_id, *tokenizer.encode(t), tokenizer.eos_id], dtype=np.int64) for t in texts]
    return translate_sources(model, sources, tokenizer, options, device, desc)


def load_translation_model(path, device: torch.device) -> TranslationModel:
    """A fine-tuned translation checkpoint (`models/translation/<variant>/seed<N>.pt`), ready to decode."""
    return translation_model(load_checkpoint(path, expected_kind="translation"), device)


def translation_model(payload: dict, device: torch.device) -> TranslationModel:
    """The network a translation checkpoint's payload describes, with its weights, in evaluation mode."""
    model = TranslationModel(TranslationConfig(**payload["model_config"]))
    model.load_state_dict(payload["state_dict"])
    return model.to(device).eval()
