"""The docs' results tables come from the result files; `lmtransfer report --check` fails when the two disagree."""

import json
from pathlib import Path

import pytest

from lmtransfer.cli.main import main as lmtransfer
from lmtransfer.core.io import write_json
from lmtransfer.reporting.pages import MetricsError, check_pages, generate, pages, write_pages

REPO = Path(__file__).resolve().parents[2]


def _variant(accuracy, std, seeds, epochs, first_seeds):
    return {"accuracy_mean": accuracy, "accuracy_std": std, "accuracy_per_seed": seeds,
            "macro_f1_mean": accuracy - 0.01, "macro_f1_std": std, "val_accuracy_mean_per_epoch": epochs,
            "first_epoch_val_accuracy_per_seed": first_seeds}


def _evaluate(gap=0.1, runs=2):
    share = {"pretraining_runs": 0.4, "finetuning_seeds": 0.0, "test_examples": 0.6}
    return {"gap": {"accuracy_mean": gap, "ci95_low": gap - 0.05, "ci95_high": gap + 0.05, "p_value": 0.00004,
                    "macro_f1_mean": 0.105, "share": share},
            "pretrained": _variant(0.70, 0.01, [0.69, 0.71], [0.65, 0.68], [0.64, 0.66]),
            "scratch": _variant(0.60, 0.03, [0.57, 0.63], [0.66, 0.67], [0.65, 0.67]),
            "baseline": {"accuracy": 0.8, "macro_f1": 0.799, "valid_accuracy": 0.79},
            "n_seeds": 2, "n_pretraining_runs": runs, "n_finetuning_seeds": 1, "n_test_examples": 1234}


PAGE = ("# Results\n\n<!-- report:test@metrics:start -->\n| old | table |\n<!-- report:test@metrics:end -->\n\n"
        "Some prose.\n\n<!-- report:epochs@metrics:start -->\n<!-- report:epochs@metrics:end -->\n")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A tiny repository: classification metrics, a README without markers, a docs page with two marked tables."""
    write_json(tmp_path / "metrics/evaluate.json", _evaluate())
    (tmp_path / "README.md").write_text("# fake\n\nno tables here\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/results.md").write_text(PAGE, encoding="utf-8")
    return tmp_path


def _tables(repo: Path) -> list[str]:
    return [problem for problem in check_pages(repo) if not problem.startswith("docs/figures/")]


def _stale(line: int, name: str) -> str:
    return f"docs/results.md:{line}: table '{name}@metrics' differs from what its files give; run `lmtransfer report`"


def test_write_fills_the_tables_between_the_markers_and_check_then_passes(repo):
    assert _tables(repo)[0] == _stale(3, "test") and "docs/results.md" in write_pages(repo)
    text = (repo / "docs/results.md").read_text(encoding="utf-8")
    assert ("<!-- report:test@metrics:start -->\n\n| test set, 1,234 texts | accuracy (mean ± std, 2 pretraining "
            "runs") in text
    assert "| pretrained, then fine-tuned | **0.7000 ± 0.0100** | 0.6900, 0.7100 |" in text
    assert "| **gap** (pretrained − scratch) | **+0.1000 [+0.0500, +0.1500], p < 0.0001** |" in text
    assert "| gap | -0.0100 | +0.0100 |\n| TF-IDF baseline | 0.7900 |  |\n\n<!-- report:epochs@metrics:end -->" in text
    assert _tables(repo) == [] and "docs/results.md" not in write_pages(repo)  # fresh: not rewritten
    assert (repo / "README.md").read_text(encoding="utf-8") == "# fake\n\nno tables here\n"


def test_a_number_changed_in_a_result_file_or_by_hand_in_a_page_makes_the_check_fail(repo, capsys):
    write_pages(repo)
    page = repo / "docs/results.md"
    page.write_text(page.read_text(encoding="utf-8").replace("| +0.0100 |", "| +0.0110 |"), encoding="utf-8")
    write_json(repo / "metrics/evaluate.json", _evaluate(gap=0.1001))
    assert _tables(repo) == [_stale(3, "test"), _stale(17, "epochs")]
    with pytest.raises(SystemExit, match="differ from the committed result files"):
        lmtransfer(["report", "--check", "--root", str(repo)])
    assert "docs/results.md:3: table 'test@metrics'" in capsys.readouterr().err


def test_unknown_tables_and_unpaired_markers_are_named_and_nothing_is_written(repo):
    broken = ("<!-- report:nothing@metrics:start -->\n<!-- report:nothing@metrics:end -->\n"
              "<!-- report:test@metrics:end -->\n<!-- report:epochs@metrics:start -->\n")
    (repo / "docs/broken.md").write_text(broken, encoding="utf-8")
    problems = _tables(repo)
    assert "docs/broken.md:1: table 'nothing@metrics' cannot be generated: unknown table 'nothing@metrics'" in (
        problems[0])
    assert problems[1:3] == ["docs/broken.md:3: end marker of 'test@metrics' without a start marker",
                             "docs/broken.md:4: start marker of 'epochs@metrics' without an end marker"]
    with pytest.raises(MetricsError, match="docs/broken.md:1"):
        write_pages(repo)
    assert (repo / "docs/results.md").read_text(encoding="utf-8") == PAGE
    (repo / "docs/broken.md").write_text("```\n<!-- report:test@metrics:start -->\n```\n", encoding="utf-8")
    assert not [line for line in _tables(repo) if "broken.md" in line]  # markers in fenced code are text


@pytest.mark.parametrize("damage, reason", [
    ("{", "metrics/evaluate.json cannot be read"),
    (json.dumps({**_evaluate(), "n_test_examples": float("nan")}), "'n_test_examples' is nan, not a finite number"),
    (json.dumps({"gap": {}}), "metrics/evaluate.json has no"),
])
def test_an_unreadable_result_is_named_with_file_and_key(repo, damage, reason):
    (repo / "metrics/evaluate.json").write_text(damage, encoding="utf-8")
    with pytest.raises(MetricsError, match=reason):
        generate("test@metrics", repo)


def test_one_pretraining_run_gets_no_share_of_the_gaps_variance(repo):
    write_json(repo / "metrics/evaluate.json", _evaluate(runs=1))
    assert "| the gap's variance, each source resampled alone | test texts 60% |" in generate("test@metrics", repo)


def test_the_label_curve_has_a_row_per_size(tmp_path):
    curve = tmp_path / "run/evaluate/label_curve.tsv"
    curve.parent.mkdir(parents=True)
    curve.write_text("labels\tn_train\tpretrained\tpretrained_std\tscratch\tscratch_std\tgap\tgap_low\tgap_high\t"
                     "p_value\tbaseline\n100\t100\t0.61\t0.02\t0.55\t0.03\t0.06\t0.01\t0.11\t0.00001\t0.58\n"
                     "all\t7397\t0.78\t0.004\t0.79\t0.005\t-0.01\t-0.02\t0\t0.2\t0.8008\n", encoding="utf-8")
    assert generate("labels@run", tmp_path).splitlines()[2:] == [
        "| 100 | 0.6100 ± 0.0200 | 0.5500 ± 0.0300 | +0.0600 [+0.0100, +0.1100], p < 0.0001 | 0.5800 |",
        "| all (7,397) | 0.7800 ± 0.0040 | 0.7900 ± 0.0050 | -0.0100 [-0.0200, +0.0000], p = 0.2000 | 0.8008 |"]


def test_a_benchmarks_table_names_its_command_and_machine_and_refuses_nan(tmp_path):
    result = {"command": "python benchmarks/demo.py", "machine": {"cpu": "a CPU", "cores": 2}, "seconds": 1300.2,
              "notes": "alone", "columns": [{"name": "stage"}, {"name": "wall s", "format": ",.1f"}],
              "rows": [["pretrain", 1234.56], ["plot", None]]}
    write_json(tmp_path / "benchmarks/results/demo.json", result)
    assert generate("bench@demo", tmp_path) == (
        "`python benchmarks/demo.py` on a CPU, 2 cores: 1,300 s; alone.\n\n"
        "| stage | wall s |\n| --- | --- |\n| pretrain | 1,234.6 |\n| plot |  |\n")
    write_json(tmp_path / "benchmarks/results/demo.json", {**result, "rows": [["pretrain", float("nan")]]})
    with pytest.raises(MetricsError, match=r"demo.json: rows\[0\] 'wall s' is nan"):
        generate("bench@demo", tmp_path)


def test_the_repositorys_own_pages_match_the_committed_result_files():
    """What `lmtransfer report --check` (`make docs`) keeps true: every table and figure of README.md and docs/."""
    assert sum(page.read_text(encoding="utf-8").count("<!-- report:") for page in pages(REPO)) >= 20
    assert check_pages(REPO) == []


def test_the_readme_is_short_and_states_numbers_only_in_generated_tables():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200 and "<!-- value:" not in readme
    assert not [page for page in pages(REPO) if "<!-- value:" in page.read_text(encoding="utf-8")]
