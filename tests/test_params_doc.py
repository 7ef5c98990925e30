"""The parameter table: generated from the parameter models, identical in the README, true to dvc.yaml."""

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from lmtransfer.cli import main
from lmtransfer.config import Params
from lmtransfer.params_doc import (
    END_MARKER, REGENERATE, SECTION_READERS, START_MARKER, format_value, params_table, table_in, with_table,
)

REPO = Path(__file__).resolve().parents[1]


def _rows(table: str) -> dict[str, tuple[str, str]]:
    """`section.key` -> (default, meaning) for every row of the generated Markdown."""
    rows = {}
    for line in table.splitlines():
        if line.startswith("| `"):
            key, default, meaning = (cell.strip() for cell in line.strip("|").split(" | "))
            rows[key.strip("`")] = (default, meaning)
    return rows


def test_the_readme_shows_the_generated_parameter_table():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert table_in(readme, "README.md") == params_table(), (
        f"README.md's parameter table (between {START_MARKER} and {END_MARKER}) differs from the parameter "
        f"models in src/lmtransfer/config.py; regenerate it with `{REGENERATE}`"
    )


def test_the_table_has_one_row_per_key_of_params_yaml_with_the_shipped_value():
    shipped = YAML(typ="safe", pure=True).load((REPO / "params.yaml").read_text(encoding="utf-8"))
    keys = [f"{section}.{key}" for section, values in shipped.items() for key in values]
    rows = _rows(params_table())
    assert list(rows) == keys  # every key, in params.yaml's order, nothing more
    for name in keys:
        section, key = name.split(".")
        assert rows[name][0] == f"`{format_value(shipped[section][key])}`", name
        assert len(rows[name][1]) > 10, f"{name} has no meaning"
    assert rows["finetune.pooling"][0] == "`mean`" and rows["pretrain.lr"][0] == "`0.002`"


def test_each_section_names_the_stages_that_read_it():
    table = params_table()
    assert "**`data`**, read by `validate`, `prepare`" in table
    assert ("**`pretrain`**, read by `validate` (`init_from`, `objective`), `pretrain`, `finetune_scratch@<seed>` "
            "(`objective`)") in table
    assert "`finetune_pretrained@<seed>` (all but `seeds`)" in table and "`evaluate` (`seeds`)" in table


def test_the_readers_of_each_section_are_the_ones_dvc_yaml_declares():
    stages = YAML(typ="safe", pure=True).load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    declared: dict[str, dict[str, tuple[str, ...] | None]] = {}
    for stage, spec in stages.items():
        for entry in (spec.get("do") or spec).get("params", []):
            section, _, key = entry.partition(".")
            readers = declared.setdefault(section, {})
            readers[stage] = None if not key else (*(readers.get(stage) or ()), key)
    assert set(declared) == set(Params.model_fields)
    for section, readers in SECTION_READERS.items():
        expected = {stage: None if keys is None else tuple(keys) for stage, keys in readers.items()}
        assert declared[section] == expected, f"{section}: dvc.yaml declares {declared[section]}"


def test_values_are_written_as_in_params_yaml():
    assert [format_value(v) for v in (True, False, "", "auto", 0.0005, 10000, [0, 1], ["the movie"])] == [
        "true", "false", "''", "auto", "0.0005", "10000", "[0, 1]", '["the movie"]'
    ]


def test_a_pipe_in_a_meaning_does_not_break_the_table(monkeypatch):
    field = Params.model_fields["plot"].annotation.model_fields["dpi"]
    monkeypatch.setattr(field, "description", "dots | per inch")
    assert "| `plot.dpi` | `120` | dots \\| per inch |" in params_table()


def test_lmtransfer_params_prints_the_table(capsys):
    main(["params"])
    assert capsys.readouterr().out == params_table()


README = f"""# project

## Parameters

Prose before the table.

{START_MARKER}
| old | table |
{END_MARKER}

Prose after the table.
"""


def test_lmtransfer_params_readme_rewrites_only_the_marked_table(tmp_path, capsys):
    path = tmp_path / "README.md"
    path.write_text(README, encoding="utf-8")
    main(["params", "--readme", str(path)])
    assert "parameter table regenerated" in capsys.readouterr().out
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# project\n\n## Parameters\n\nProse before the table.\n\n" + START_MARKER + "\n\n")
    assert text.endswith("\n\n" + END_MARKER + "\n\nProse after the table.\n")
    assert "| old | table |" not in text and table_in(text) == params_table()
    main(["params", "--readme", str(path)])
    assert "already up to date" in capsys.readouterr().out
    assert path.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("text", ["no markers at all\n", f"{END_MARKER}\n{START_MARKER}\n",
                                  f"{START_MARKER}\n{END_MARKER}\n{START_MARKER}\n{END_MARKER}\n"])
def test_a_file_without_exactly_one_pair_of_markers_is_an_error_naming_them(tmp_path, text):
    path = tmp_path / "README.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit, match="params-table:start"):
        main(["params", "--readme", str(path)])
    assert path.read_text(encoding="utf-8") == text
    with pytest.raises(ValueError, match="params-table:end"):
        with_table(text, params_table())
