"""Pretraining objectives: what the language model learns to predict, and from which batches.

* `clm`: the next token at every position of packed windows (causal attention);
* `mlm`: BERT's masked tokens, predicted from both sides (bidirectional attention), on
  packed windows that start with the begin-of-text id as [CLS]; with next-sentence
  prediction, on sentence pairs instead (`datasets.SentencePairs`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lmtransfer.core.config import PretrainParams
from lmtransfer.core.errors import ConfigError
from lmtransfer.modeling.model import LanguageModel, MaskedLanguageModel, ModelConfig
from lmtransfer.pretraining.masking import MaskedWindows, SentencePairs, TokenMasker
from lmtransfer.tokens.batches import PackedBatches
from lmtransfer.tokens.tokenizer import real_mask_id


@dataclass(frozen=True)
class Objective:
    name: str = "clm"
    masker: TokenMasker | None = None  # mlm only
    bos_id: int = 2
    eos_id: int = 3
    pad_id: int = 0
    next_sentence: bool = False

    @classmethod
    def from_params(cls, params: PretrainParams, meta: dict[str, Any]) -> Objective:
        """The objective `pretrain.*` asks for over the tokenized data's ids (`data/tokenized/meta.json`)."""
        ids = {key: meta[key] for key in ("bos_id", "eos_id", "pad_id")}
        if params.objective == "clm":
            return cls("clm", **ids)
        mask_id = real_mask_id(meta.get("mask_id"), meta["unk_id"])
        if mask_id is None:
            raise ConfigError(
                "pretrain.objective: mlm needs a <mask> token, and this tokenizer has none (a tokenizer.vocab_file "
                "dictionary or a tokenizer.model_file without <mask>); use the tokenizer the pipeline trains "
                "(tokenizer.model_file: '', tokenizer.vocab_file: '') or pretrain.objective: clm"
            )
        specials = (meta["pad_id"], meta["unk_id"], meta["bos_id"], meta["eos_id"], mask_id)
        masker = TokenMasker(mask_id, meta["vocab_size"], specials, params.mask_prob)
        return cls("mlm", masker, next_sentence=params.nsp, **ids)

    def build_model(self, config: ModelConfig) -> LanguageModel:
        if self.name == "mlm":
            return MaskedLanguageModel(config, next_sentence=self.next_sentence)
        return LanguageModel(config)

    def checkpoint_fields(self) -> dict[str, Any]:
        """What a pretrained checkpoint records, so fine-tuning, `fill` and `generate` rebuild the right model."""
        return {"objective": self.name, "next_sentence": self.next_sentence}

    def without_next_sentence(self) -> Objective:
        """The adaptation phase's: the task's texts are independent sentences, so no pairs, masked tokens only."""
        return replace(self, next_sentence=False)

    def train_batches(self, ids: np.ndarray, params: PretrainParams, seed: int, what: str):
        if self.name == "clm":
            return PackedBatches(ids, params.seq_len, params.batch_size, seed, what)
        if self.next_sentence:
            return self._pairs(ids, params, seed, what)
        return MaskedWindows(ids, params.seq_len, params.batch_size, self.masker, self.bos_id, seed, what)

    def valid_batches(self, ids: np.ndarray, params: PretrainParams, seed: int, what: str) -> tuple:
        """(token batches, sentence pairs or None): masked-token scores come from the same windows with or
        without next-sentence prediction, so the two are comparable; pairs add its accuracy."""
        if self.name == "clm":
            return PackedBatches(ids, params.seq_len, params.batch_size, seed, what), None
        windows = MaskedWindows(ids, params.seq_len, params.batch_size, self.masker, self.bos_id, seed, what)
        return windows, (self._pairs(ids, params, seed, what) if self.next_sentence else None)

    def _pairs(self, ids: np.ndarray, params: PretrainParams, seed: int, what: str) -> SentencePairs:
        return SentencePairs(ids, params.seq_len, params.batch_size, self.masker, self.bos_id, self.eos_id,
                             self.pad_id, seed, what)
