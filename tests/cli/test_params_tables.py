"""The parameter tables (classification and translation): generated from the parameter models, identical in
docs/guide/parameters.md, true to each task's dvc.yaml."""

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from lmtransfer.classification.config import ClassificationParams
from lmtransfer.cli.main import main
from lmtransfer.cli.params_tables import (
    END_MARKER,
    PAGE,
    REGENERATE,
    START_MARKER,
    TABLES,
    format_value,
    params_table,
    table_in,
    with_table,
)

REPO = Path(__file__).resolve().parents[2]
TASK_FOLDERS = {"classification": REPO, "translation": REPO / "translation"}  # each task's params.yaml, dvc.yaml


def _rows(table: str) -> dict[str, tuple[str, str]]:
    """`section.key` -> (default, meaning) for every row of the generated Markdown."""
    rows = {}
    for line in table.splitlines():
        if line.startswith("| `"):
            key, default, meaning = (cell.strip() for cell in line.strip("|").split(" | "))
            rows[key.strip("`")] = (default, meaning)
    return rows


@pytest.mark.parametrize("task", TABLES)
def test_the_readme_shows_the_generated_parameter_table(task):
    readme = (REPO / PAGE).read_text(encoding="utf-8")
    assert table_in(readme, PAGE, task) == params_table(task), (
        f"{PAGE}'s {task} parameter table (between {TABLES[task].start} and {TABLES[task].end}) differs from "
        f"the parameter models; regenerate it with `{REGENERATE}`"
    )


@pytest.mark.parametrize("task", TABLES)
def test_the_table_has_one_row_per_key_of_params_yaml_with_the_shipped_value(task):
    shipped = YAML(typ="safe", pure=True).load((TASK_FOLDERS[task] / "params.yaml").read_text(encoding="utf-8"))
    sections = {section: values for section, values in shipped.items() if isinstance(values, dict)}  # not `task`
    keys = [f"{section}.{key}" for section, values in sections.items() for key in values]
    rows = _rows(params_table(task))
    assert list(rows) == keys  # every key, in params.yaml's order, nothing more
    for name in keys:
        section, key = name.split(".")
        assert rows[name][0] == f"`{format_value(sections[section][key])}`", name
        assert len(rows[name][1]) > 10, f"{name} has no meaning"


def test_each_task_shows_its_own_defaults():
    classification, translation = _rows(params_table("classification")), _rows(params_table("translation"))
    assert classification["finetune.pooling"][0] == "`mean`" and classification["pretrain.lr"][0] == "`0.003`"
    assert classification["model.d_model"][0] == "`256`" and translation["model.d_model"][0] == "`128`"
    assert translation["finetune.label_smoothing"][0] == "`0.1`" and "finetune.pooling" not in translation


def test_each_section_names_the_stages_that_read_it():
    table = params_table()
    assert "**`data`**, read by `validate`, `prepare`" in table
    assert ("**`pretrain`**, read by `validate` (`init_from`, `objective`), `pretrain@<p>` (all but `seeds`), "
            "`finetune_scratch@<p>-<seed>` (`objective`), `finetune_scratch_labels@<size>-<p>-<seed>` (`objective`), "
            "`evaluate` (`seeds`), `plot` (`seeds`)") in table
    assert "`finetune_pretrained@<p>-<seed>` (all but `seeds`, `label_sizes`, `label_seed`)" in table
    assert "`finetune_pretrained_labels@<size>-<p>-<seed>` (all but `seeds`, `label_sizes`)" in table
    assert "`evaluate` (`seeds`, `label_sizes`, `label_seed`)" in table
    assert "`finetune_pretrained@<p>-<seed>` (all but `seeds`)" in params_table("translation")


@pytest.mark.parametrize("task", TABLES)
def test_the_readers_of_each_section_are_the_ones_dvc_yaml_declares(task):
    stages = YAML(typ="safe", pure=True).load((TASK_FOLDERS[task] / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    declared: dict[str, dict[str, tuple[str, ...] | None]] = {}
    for stage, spec in stages.items():
        entries = (spec.get("do") or spec).get("params", [])  # a key, or {params.yaml: [keys]} (a YAML anchor's)
        for entry in [k for e in entries for k in ([e] if isinstance(e, str) else [k for v in e.values() for k in v])]:
            section, _, key = entry.partition(".")
            readers = declared.setdefault(section, {})
            readers[stage] = None if not key else (*(readers.get(stage) or ()), key)
    assert set(declared) == set(TABLES[task].params.model_fields)
    for section, readers in TABLES[task].readers.items():
        expected = {stage: None if keys is None else tuple(keys) for stage, keys in readers.items()}
        assert declared[section] == expected, f"{section}: dvc.yaml declares {declared[section]}"


def test_values_are_written_as_in_params_yaml():
    assert [format_value(v) for v in (True, False, "", "auto", 0.0005, 10000, [0, 1], ["the movie"])] == [
        "true", "false", "''", "auto", "0.0005", "10000", "[0, 1]", '["the movie"]'
    ]


def test_a_pipe_in_a_meaning_does_not_break_the_table(monkeypatch):
    field = ClassificationParams.model_fields["plot"].annotation.model_fields["dpi"]
    monkeypatch.setattr(field, "description", "dots | per inch")
    assert "| `plot.dpi` | `120` | dots \\| per inch |" in params_table()


def test_lmtransfer_params_prints_the_table(capsys):
    main(["params"])
    assert capsys.readouterr().out == params_table()
    main(["params", "--translation"])
    assert capsys.readouterr().out == params_table("translation")


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
    assert "parameter tables regenerated" in capsys.readouterr().out
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# project\n\n## Parameters\n\nProse before the table.\n\n" + START_MARKER + "\n\n")
    assert text.endswith("\n\n" + END_MARKER + "\n\nProse after the table.\n")
    assert "| old | table |" not in text and table_in(text) == params_table()
    main(["params", "--readme", str(path)])
    assert "already up to date" in capsys.readouterr().out
    assert path.read_text(encoding="utf-8") == text


def test_lmtransfer_params_readme_rewrites_both_tasks_tables_where_both_are_marked(tmp_path):
    translation = TABLES["translation"]
    path = tmp_path / "README.md"
    path.write_text(README + f"\n{translation.start}\n{translation.end}\n", encoding="utf-8")
    main(["params", "--readme", str(path)])
    text = path.read_text(encoding="utf-8")
    assert table_in(text) == params_table() and table_in(text, task="translation") == params_table("translation")


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
