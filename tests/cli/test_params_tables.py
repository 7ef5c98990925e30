"""docs/guide/parameters.md's tables: values from the params file, meanings from the model, readers from dvc.yaml."""

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from lmtransfer.classification.config import ClassificationParams
from lmtransfer.cli.main import main
from lmtransfer.cli.params_tables import MARKERS, PAGE, format_value, params_table, readers, with_tables

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("task", MARKERS)
def test_the_page_shows_the_generated_table_with_every_key_of_the_params_file(task):
    page = (REPO / PAGE).read_text(encoding="utf-8")
    assert with_tables(page, PAGE, REPO) == page, f"{PAGE} is stale: run `lmtransfer params --readme {PAGE}`"
    folder = REPO / ("translation" if task == "translation" else "")
    values = YAML(typ="safe").load((folder / "params.yaml").read_text(encoding="utf-8"))
    table = params_table(task, REPO)
    for section, keys in values.items():
        for key, value in (keys.items() if isinstance(keys, dict) else []):  # `task: translation` is no section
            assert f"| `{section}.{key}` | `{format_value(value)}` |" in table


def test_a_section_names_the_stages_whose_params_read_it():
    dvc_yaml = {"stages": {"validate": {"params": ["data", "pretrain.objective"]},
                           "pretrain": {"matrix": {"seed": [0]}, "params": ["pretrain.lr", "pretrain.objective"]},
                           "evaluate": {"params": ["pretrain.seeds"]}}}
    assert readers(dvc_yaml, "data", ["source", "seed"]) == "`validate`"
    assert readers(dvc_yaml, "pretrain", ["lr", "objective", "seeds"]) == (
        "`validate` (`objective`), `pretrain@…` (all but `seeds`), `evaluate` (`seeds`)")
    assert readers(dvc_yaml, "plot", ["dpi"]) == "no stage"


def test_values_are_written_as_in_params_yaml_and_a_pipe_does_not_break_a_cell(monkeypatch):
    assert [format_value(v) for v in (True, "", [1, 2], ["the movie"], 0.5)] == ["true", "''", "[1, 2]",
                                                                                '["the movie"]', "0.5"]
    field = ClassificationParams.model_fields["plot"].annotation.model_fields["dpi"]
    monkeypatch.setattr(field, "description", "dots | per inch")
    assert "dots \\| per inch |" in params_table(root=REPO)


def test_lmtransfer_params_prints_and_rewrites_the_tables_between_the_markers(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    main(["params"])
    assert capsys.readouterr().out == params_table()
    start, end = MARKERS["classification"]
    path = tmp_path / "page.md"
    path.write_text(f"before\n{start}\n| old |\n{end}\nafter\n", encoding="utf-8")
    main(["params", "--readme", str(path)])
    assert path.read_text(encoding="utf-8") == f"before\n{start}\n\n{params_table().strip()}\n\n{end}\nafter\n"
    main(["params", "--readme", str(path)])
    assert capsys.readouterr().out.endswith("already up to date\n")


@pytest.mark.parametrize("text", ["no markers at all\n", "<!-- params-table:end -->\n<!-- params-table:start -->\n"])
def test_a_page_without_one_pair_of_markers_is_an_error_naming_them(tmp_path, text):
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit, match="params-table:start"):
        main(["params", "--readme", str(path)])
    assert path.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("key", ["pretrain", "finetune"])
def test_params_check_names_the_file_and_a_seeds_key_that_is_not_a_list(tmp_path, capsys, key):
    """What `make run` runs before `dvc repro`, whose own reading of the stage grid names neither."""
    bad = tmp_path / "params.yaml"
    bad.write_text(f"{key}:\n  seeds: 5.5\n")
    with pytest.raises(SystemExit) as stopped:
        main(["params", "--check", str(bad)])
    assert f"{bad}: invalid parameters" in str(stopped.value) and f"{key}.seeds: Input should be a valid list" in str(
        stopped.value)
    main(["params", "--check", str(REPO / "translation/params.yaml")])
    assert capsys.readouterr().out.endswith("translation/params.yaml: every parameter valid\n")
