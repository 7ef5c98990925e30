"""Shared test set-up."""

from pathlib import Path

import pytest
import torch

from shipped import shipped


@pytest.fixture(autouse=True)
def single_thread():
    """Tiny models gain nothing from threads, and OpenMP spinning on a busy machine costs 100x."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def pytest_collection_modifyitems(config, items):
    """`make test` runs `pytest -n 2 --dist loadscope --no-loadscope-reorder`: each module goes whole to one worker,
    which runs its tests in file order (so a module's shared pipeline run is built once), and the modules are
    handed out in this order: the end-to-end ones (tests/pipeline/, minutes each) first, the others after, to fill
    both workers up to the end."""
    items.sort(key=lambda item: item.path.parent.name != "pipeline")  # stable: each module's tests in file order


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    """A factory: a 40-piece sentencepiece tokenizer trained on 300 random lines of `words`, saved in a folder of its
    own as the tokenize stage saves one; returns (that folder, the tokenizer)."""
    import random

    from lmtransfer.tokens.tokenizer import SentencePieceTokenizer, save_tokenizer, train_sentencepiece

    def make(words: list[str]):
        root = tmp_path_factory.mktemp("tokenizer")
        rng = random.Random(0)
        corpus = root / "corpus.txt"
        corpus.write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(300)) + "\n")
        folder = root / "tokenized"
        folder.mkdir()
        tokenizer = SentencePieceTokenizer(train_sentencepiece(corpus, shipped("tokenizer", vocab_size=40)))
        save_tokenizer(tokenizer, folder)
        return folder, tokenizer

    return make


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory):
    """A factory: `empty_store(folder)` puts a fresh, empty SQLite MLflow store at folder/mlflow.db and returns its
    path. MLflow's schema migrations take seconds, so they run once a session and each store is a copy."""
    import shutil

    from mlflow import MlflowClient

    template = tmp_path_factory.mktemp("empty-store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments(max_results=1)

    def make(folder: Path) -> Path:
        return Path(shutil.copyfile(template, folder / "mlflow.db"))

    return make


@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory, empty_store):
    """A fresh SQLite MLflow store for the module, MLFLOW_TRACKING_URI pointing at it (put back after); yields the id
    of an experiment whose artifacts stay in the store's folder."""
    import mlflow

    store = tmp_path_factory.mktemp("store")
    empty_store(store)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store / 'mlflow.db'}")
        mlflow.set_tracking_uri(None)  # the variable's store
        yield mlflow.create_experiment("t", artifact_location=(store / "artifacts").as_uri())
    mlflow.set_tracking_uri(None)
