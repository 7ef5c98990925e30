"""params.yaml as the repository ships it, for tests: the typed config has no defaults, so a test that needs a
params section takes the shipped one and changes what it tests (`from shipped import shipped`)."""

import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def shipped_params(task: str = "classification"):
    """The repository's params file, validated (translation/params.yaml's for task="translation")."""
    from lmtransfer.classification.config import load_classification_params
    from lmtransfer.translation.config import load_translation_params

    if task == "translation":
        return load_translation_params(REPO / "translation" / "params.yaml")
    return load_classification_params(REPO / "params.yaml")


def shipped_raw(changes: dict | None = None, task: str = "classification") -> dict:
    """The repository's params file as YAML (translation/params.yaml for task="translation") with `changes`
    ({section: {key: value}}) merged in: the raw input a params test edits."""
    from lmtransfer.core.config import read_params_file

    raw = read_params_file(REPO / "translation" / "params.yaml" if task == "translation" else REPO / "params.yaml")
    for section, keys in (changes or {}).items():
        raw[section] = {**raw.get(section, {}), **keys} if isinstance(keys, dict) else keys
    return raw


def shipped(section: str, task: str = "classification", **changes):
    """A params section as the repository's params.yaml ships it (translation/params.yaml's for task="translation"),
    with `changes` applied and validated: the typed config has no defaults, params.yaml is the one source.
    """
    values = getattr(shipped_params(task), section)
    return type(values).model_validate({**values.model_dump(), **changes})
