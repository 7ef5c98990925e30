"""Using a classifier: class probabilities for every example of a split (validation, test, new texts)."""

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
    """Class probabilities for every example, and the mean cross-entropy loss (labels as given). The model goes to
    `device` first: a checkpoint is built on the CPU (`lmtransfer predict` on a GPU machine failed on that)."""
    model.to(device).eval()
    probabilities, total_loss = [], 0.0
    for ids, labels in classification_batches(split, batch_size, max_len, model.base.config.pad_id):
        with autocast(device):
            logits = model(ids.to(device)).float()
        total_loss += float(F.cross_entropy(logits, labels.to(device), reduction="sum"))
        probabilities.append(torch.softmax(logits, dim=-1).cpu().numpy())
    return np.concatenate(probabilities), total_loss / len(split)
