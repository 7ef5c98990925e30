"""Parameter validation: the repository's params.yaml (the one place values live) and errors that name the key."""

import copy
import dataclasses
import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from lmtransfer.classification.config import (
    ClassificationParams,
    load_classification_params,
    parse_classification_params,
)
from lmtransfer.core.config import ConfigError
from lmtransfer.modeling.model import ModelConfig, ModelParams

from shipped import shipped_raw

REPO_PARAMS = Path(__file__).resolve().parents[2] / "params.yaml"


PIECES = {"source": "files", "train": "train.spm", "format": "pieces"}
DICTIONARY = {"vocab_file": "dict.txt"}


def _parse(changes: dict):
    return parse_classification_params(shipped_raw(changes))


def _raw_error(raw) -> str:
    with pytest.raises(ConfigError) as info:
        parse_classification_params(raw)
    return str(info.value)


def test_no_key_has_a_default_of_its_own_so_a_missing_one_is_named():
    """params.yaml is the one place values live: a key left out is an error naming it, not a value from code."""
    raw = shipped_raw()
    del raw["model"]["n_layers"], raw["pretrain"]["lr"]
    message = _raw_error(raw)
    assert "model.n_layers: Field required" in message and "pretrain.lr: Field required" in message
    assert "plot: Field required" in _raw_error({k: v for k, v in shipped_raw().items() if k != "plot"})
    assert "model: Field required" in _raw_error({}) and "mapping" in _raw_error(["model"])


def test_a_model_knob_is_a_field_of_the_model_config_and_a_key_of_params_yaml():
    """ModelParams is derived from ModelConfig: its keys are the config's annotated fields plus `attention`."""
    tokenizer_side = {"vocab_size", "pad_id", "causal"}
    assert set(ModelParams.model_fields) == {f.name for f in dataclasses.fields(ModelConfig)} - tokenizer_side | {
        "attention"}
    assert set(ModelParams.model_fields) == set(shipped_raw()["model"])


def test_every_parameter_has_a_description():
    for section, field in ClassificationParams.model_fields.items():
        for key, info in field.annotation.model_fields.items():
            assert info.description and info.description.strip(), f"{section}.{key} has no description"


def test_the_repository_params_file_is_valid_and_a_section_overrides_only_its_own_keys():
    shipped = load_classification_params(REPO_PARAMS)
    assert isinstance(shipped, ClassificationParams) and shipped.model.d_model % shipped.model.n_heads == 0
    assert shipped.data.valid_fraction + shipped.data.test_fraction < 0.9
    params = _parse({"model": {"n_layers": 3}, "pretrain": {"lr": 0.01}})
    assert (params.model.n_layers, params.model.d_model, params.pretrain.lr) == (3, shipped.model.d_model, 0.01)
    assert params.finetune == shipped.finetune
    sections = params.sections("model", "finetune")
    assert set(sections) == {"model", "finetune"} and sections["model"]["n_layers"] == 3


@pytest.mark.parametrize("changes, keys", [
    ({"model": {"n_layer": 3}}, ["model.n_layer", "unknown"]),
    ({"modle": {"n_layers": 3}}, ["modle", "unknown"]),
    ({"model": {"d_model": "big"}}, ["model.d_model"]),
    ({"pretrain": {"batch_size": "32"}}, ["pretrain.batch_size"]),  # strings are not coerced to numbers
    ({"model": {"d_model": 30, "n_heads": 4}}, ["model.d_model", "model.n_heads"]),
    ({"model": {"d_model": 15, "n_heads": 1}}, ["model.d_model", "even"]),
    ({"finetune": {"pooling": "max"}}, ["finetune.pooling"]),
    ({"pretrain": {"lr": -1}}, ["pretrain.lr"]),
    ({"tokenizer": {"normalization": "lowercase"}}, ["tokenizer.normalization"]),
    ({"data": {"valid_fraction": 0.5, "test_fraction": 0.45}}, ["data.valid_fraction", "data.test_fraction"]),
    ({"model": {"n_layer": 3}, "pretrain": {"lr": -1}}, ["model.n_layer", "pretrain.lr"]),  # every problem at once
    ({"data": {"source": "files"}}, ["data.train"]),
    ({"data": {"source": "reviews-zh", "corpus": ["x.txt"]}}, ["data.corpus", "reviews-zh"]),  # not ignored
    ({"data": {"source": "files", "train": "a", "format": "xml"}}, ["data.format"]),
    ({"data": {"encoding": "klingon-8"}}, ["data.encoding"]),
    ({"finetune": {"seeds": [0, 0]}}, ["finetune.seeds", "repeated seed"]),
    ({"finetune": {"seeds": []}}, ["finetune.seeds", "at least 1"]),
    ({"finetune": {"seeds": [-1]}}, ["finetune.seeds", "non-negative"]),
    ({"data": PIECES}, ["tokenizer.vocab_file"]),  # pieces need an existing tokenizer
    ({"data": {"source": "files", "train": "t.csv"}, "tokenizer": DICTIONARY}, ["tokenizer.model_file"]),  # text: a
    ({"data": {**PIECES, "corpus": ["fr.txt"]}, "tokenizer": DICTIONARY}, ["tokenizer.model_file"]),  # segmenter
])
def test_a_bad_value_is_refused_naming_its_key(changes, keys):
    message = _raw_error(shipped_raw(changes))
    assert all(key in message for key in keys), message


def test_files_source_requires_a_train_file_and_nothing_else_and_pieces_need_a_dictionary_raw_text_a_segmenter():
    params = _parse({"data": {"source": "files", "train": "a.csv"}})
    assert (params.data.valid, params.data.test, params.data.corpus) == ("", "", [])
    assert _parse({"data": {"source": "files", "train": "a.csv", "corpus": "big/*.txt"}}).data.corpus == ["big/*.txt"]
    assert _parse({"data": PIECES, "tokenizer": DICTIONARY}).data.corpus_pieces
    _parse({"data": {**PIECES, "corpus": ["fr.txt"]}, "tokenizer": {**DICTIONARY, "model_file": "spm.model"}})


def test_yaml_12_exponent_without_dot_loads_as_a_float(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(REPO_PARAMS.read_text(encoding="utf-8").replace("  lr: 0.003", "  lr: 3e-4")
                    .replace("  lr: 0.001", "  lr: 1e-5"), encoding="utf-8")
    params = load_classification_params(path)
    assert isinstance(params.pretrain.lr, float)
    assert (params.pretrain.lr, params.finetune.lr) == pytest.approx((3e-4, 1e-5))


@pytest.mark.parametrize("content, said", [
    (b"model:\n  n_layer: 3\n", "model.n_layer"),
    (None, "parameter file not found"),
    (b"model: [1, 2\n  d_model: {\n", "not valid YAML"),
    (b"pretrain:\n  lr: 0.1\n  lr: 0.2\n", "duplicate"),  # an error, not a silent override
    ("# r\u00e9glages\nmodel:\n  n_layers: 2\n".encode("latin-1"), "not UTF-8"),
])
def test_a_params_file_that_cannot_be_used_is_named_with_the_reason(tmp_path, content, said):
    path = tmp_path / "params.yaml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_classification_params(path)
    assert str(path) in str(info.value) and said in str(info.value)


SWEEP = re.compile(r"dvc exp run((?:\s+(?:-S\s+'[^']+'|-S\s+\S+|-n\s+\S+|--\S+))+)")
SETTING = re.compile(r"-S\s+'?([a-z_]+)\.([a-z_]+)=([^'\s`]+)'?")


def _doc_sweeps() -> list[tuple[str, list[tuple[str, str, str]]]]:
    root = REPO_PARAMS.parent
    found = []
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for match in SWEEP.finditer(page.read_text(encoding="utf-8")):
            settings = SETTING.findall(match.group(1))
            if settings:
                found.append((f"{page.relative_to(root)}: dvc exp run{match.group(1)}", settings))
    return found


def test_every_sweep_example_in_the_docs_is_valid_and_changes_something():
    """A documented `dvc exp run -S ...` parses, changes a value, and sets nothing the others make useless."""
    shipped = YAML(typ="safe").load(REPO_PARAMS.read_text())
    shipped_pretrain = load_classification_params(REPO_PARAMS).pretrain
    examples = _doc_sweeps()
    assert len(examples) >= 10  # the sweeps page alone has a dozen: the pattern still finds them
    for where, settings in examples:
        raw = copy.deepcopy(shipped)
        for section, key, text in settings:
            assert key in raw[section], f"{where}: {section}.{key} is not a parameter"
            raw[section][key] = YAML(typ="safe").load(text)
        assert raw != shipped, f"{where}: changes nothing"
        params = parse_classification_params(raw, where)
        assert params.pretrain.ignored_settings(shipped_pretrain) == [], where


def test_a_setting_the_others_make_useless_is_named():
    defaults = load_classification_params(REPO_PARAMS).pretrain
    assert defaults.ignored_settings(defaults) == []
    pretrain = defaults.model_copy(update={"epochs": defaults.epochs + 1})
    notes = pretrain.ignored_settings(defaults)
    assert pretrain.max_steps > 0 and [note.split(" ")[0] for note in notes] == [f"pretrain.epochs={pretrain.epochs}"]
    assert pretrain.model_copy(update={"max_steps": 0}).ignored_settings(defaults) == []  # whole passes
