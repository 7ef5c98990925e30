"""Shared test set-up."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # the project's tools (import_closure)


@pytest.fixture(autouse=True)
def single_thread():
    """Tiny models gain nothing from threads, and OpenMP spinning on a busy machine costs 100x."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
