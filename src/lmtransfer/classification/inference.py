"""Class probabilities for a split, or for new texts (`classify_texts`: `lmtransfer predict` and the MLflow model
both call it, so they agree to the bit)."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from lmtransfer.modeling.model import Classifier
from lmtransfer.modeling.runtime import autocast
from lmtransfer.tokens.batches import classification_batches
from lmtransfer.tokens.id_files import LabeledSplit


@torch.no_grad()
def predict(
    model: Classifier, split: LabeledSplit, batch_size: int, max_len: int, device: torch.device
) -> tuple[np.ndarray, float]:
    """Class probabilities for every example and the mean cross-entropy loss; the model goes to `device` first (a
    checkpoint is built on the CPU)."""
    model.to(device).eval()
    probabilities, total_loss = [], 0.0
    for ids, labels in classification_batches(split, batch_size, max_len, model.base.config.pad_id):
        with autocast(device):
            logits = model(ids.to(device)).float()
        total_loss += float(F.cross_entropy(logits, labels.to(device), reduction="sum"))
        probabilities.append(torch.softmax(logits, dim=-1).cpu().numpy())
    return np.concatenate(probabilities), total_loss / len(split)


def classify_texts(payload: dict, tokenizer, texts: list[str], device: torch.device, batch_size: int = 64) -> np.ndarray:
    """Class probabilities of a checkpoint's payload for raw texts, encoded as its training texts were."""
    from lmtransfer.modeling.checkpoint import build_classifier
    from lmtransfer.tokens.tokenizer import encode_for_classification

    ids, offsets = encode_for_classification(tokenizer, texts)
    split = LabeledSplit(ids, offsets, np.zeros(len(texts), dtype=np.int64))
    probabilities, _ = predict(build_classifier(payload), split, batch_size, payload["max_len"], device)
    return probabilities
