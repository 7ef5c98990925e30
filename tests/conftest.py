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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the markers
def pytest_collection_modifyitems(config, items):
    """Under `pytest -n 2 --dist loadgroup` (`make test`): the tests that share a module-scoped fixture (a
    pipeline run that they change and read in turn) form one group, which runs on one worker in file order."""
    for item in items:
        definitions = getattr(item, "_fixtureinfo", None)
        shared = definitions and any(defs[-1].scope == "module" for name, defs in
                                     definitions.name2fixturedefs.items() if name in item.fixturenames and defs)
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
