"""The end-to-end tests' shared tiny pipeline run."""

from pathlib import Path

import pytest

from pipeline_repo import copy_repo, results_of, tiny_pipeline


@pytest.fixture(scope="module")
def pipeline_repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A copy of the session's tiny run (`pipeline_repo.tiny_pipeline`) a module's tests change and restore in turn."""
    root = tmp_path_factory.mktemp("pipeline") / "repo"
    return root, copy_repo(tiny_pipeline(tmp_path_factory), root)


@pytest.fixture
def own_pipeline_repo(tmp_path, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A copy of the session's tiny run for this test alone (a copy is cheaper than putting a change back)."""
    root = tmp_path / "repo"
    return root, copy_repo(tiny_pipeline(tmp_path_factory), root)


@pytest.fixture(scope="session")
def first_run(tmp_path_factory) -> dict[str, bytes]:
    """The result files of that run (`pipeline_repo.results_of`): what every rerun must give back."""
    return results_of(tiny_pipeline(tmp_path_factory))
