"""Shared test set-up."""

import pytest
import torch


@pytest.fixture(autouse=True)
def single_thread():
    """Tiny models gain nothing from threads, and OpenMP spinning on a busy machine costs 100x."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
