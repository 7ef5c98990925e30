"""The docs' results tables: generated from the metrics files between markers, and a stale copy is caught."""

import json
from pathlib import Path

import pytest

from lmtransfer.reporting.pages import TABLES, PagesError, check_pages, generate, main, pages, write_pages
from lmtransfer.reporting.sources import BASELINE, EVALUATE, LABEL_CURVE, RESULT_RUNS

REPO = Path(__file__).resolve().parents[2]

CLASSIFICATION_TEST = """\
| test set, 1,234 sentences | accuracy (mean ± std over 2 pretraining runs × 1 fine-tuning seed) | per run | macro-F1 |
|---|---|---|---|
| pretrained, then fine-tuned | **0.7000 ± 0.0100** | 0.6900, 0.7100 | 0.6950 ± 0.0200 |
| same network from scratch | 0.6000 ± 0.0300 | 0.5700, 0.6300 | 0.5900 ± 0.0400 |
| **gap** (pretrained − scratch) | **+0.1000**, 95% CI [+0.0500, +0.1500], p < 0.0001 | | +0.1050 |
| the gap's variance, each source resampled alone | pretraining runs 40%, test sentences 60% | | |
| TF-IDF + logistic regression (baseline stage) | **0.8000** | (deterministic) | 0.7990 |
"""
CLASSIFICATION_EPOCHS = """\
| validation accuracy (mean of 2 runs) | epoch 1 | epoch 2 | epoch 3 |
|---|---|---|---|
| pretrained | 0.6500 (0.6400, 0.6600) | 0.6800 | 0.6900 |
| from scratch | 0.6600 (0.6500, 0.6700) | 0.6700 | 0.6750 |
| gap | **-0.0100** | +0.0100 | +0.0150 |
| TF-IDF baseline | 0.7900 | | |
"""


def _variant(accuracy, std, seeds, f1, f1_std, epochs, first_seeds):
    return {"accuracy_mean": accuracy, "accuracy_std": std, "accuracy_per_seed": seeds, "macro_f1_mean": f1,
            "macro_f1_std": f1_std, "val_accuracy_mean_per_epoch": epochs,
            "first_epoch_val_accuracy_per_seed": first_seeds}


def _evaluate(gap=0.1, p_value=0.00004):
    return {"gap": {"accuracy_mean": gap, "ci95_low": gap - 0.05, "ci95_high": gap + 0.05, "p_value": p_value,
                    "macro_f1_mean": 0.105,
                    "share": {"pretraining_runs": 0.4, "finetuning_seeds": 0.0, "test_examples": 0.6}},
            "pretrained": _variant(0.70, 0.01, [0.69, 0.71], 0.695, 0.02, [0.65, 0.68, 0.69], [0.64, 0.66]),
            "scratch": _variant(0.60, 0.03, [0.57, 0.63], 0.59, 0.04, [0.66, 0.67, 0.675], [0.65, 0.67]),
            "n_seeds": 2, "n_pretraining_runs": 2, "n_finetuning_seeds": 1, "n_test_examples": 1234}


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A tiny repository: classification metrics, a README without markers, a docs page with two marked tables."""
    _write_json(tmp_path / "metrics/evaluate.json", _evaluate())
    _write_json(tmp_path / "metrics/baseline.json", {"accuracy": 0.8, "macro_f1": 0.799, "valid_accuracy": 0.79})
    (tmp_path / "README.md").write_text("# fake\n\nno tables here\n", encoding="utf-8")
    page = tmp_path / "docs/results/classification.md"
    page.parent.mkdir(parents=True)
    page.write_text("# Results\n\n<!-- report:classification-test:start -->\n| old | table |\n"
                    "<!-- report:classification-test:end -->\n\nSome prose.\n\n"
                    "<!-- report:classification-epochs:start -->\n<!-- report:classification-epochs:end -->\n",
                    encoding="utf-8")
    return tmp_path


def _page(repo: Path) -> Path:
    return repo / "docs/results/classification.md"


def test_write_pages_fills_the_tables_between_the_markers(repo):
    assert write_pages(repo) == [_page(repo)]
    assert _page(repo).read_text(encoding="utf-8") == (
        f"# Results\n\n<!-- report:classification-test:start -->\n\n{CLASSIFICATION_TEST}\n"
        f"<!-- report:classification-test:end -->\n\nSome prose.\n\n"
        f"<!-- report:classification-epochs:start -->\n\n{CLASSIFICATION_EPOCHS}\n"
        "<!-- report:classification-epochs:end -->\n")
    assert (repo / "README.md").read_text(encoding="utf-8") == "# fake\n\nno tables here\n"


def test_check_finds_the_stale_page_and_passes_after_write(repo):
    assert check_pages(repo)[0].startswith("docs/results/classification.md:3: table 'classification-test' differs")
    write_pages(repo)
    assert check_pages(repo) == []
    assert write_pages(repo) == []  # a fresh page is not rewritten
    assert main(["--check", "--root", str(repo)]) == 0


def test_a_number_edited_by_hand_is_reported_with_file_line_and_name_first(repo, capsys):
    write_pages(repo)
    text = _page(repo).read_text(encoding="utf-8")
    _page(repo).write_text(text.replace("0.6800 |", "0.6810 |").replace("**0.7000 ± 0.0100**", "**0.7001 ± 0.0100**"),
                           encoding="utf-8")
    assert check_pages(repo) == [
        "docs/results/classification.md:3: table 'classification-test' differs from what metrics/evaluate.json and "
        "metrics/baseline.json give; run `lmtransfer report`",
        "docs/results/classification.md:17: table 'classification-epochs' differs from what metrics/evaluate.json "
        "and metrics/baseline.json give; run `lmtransfer report`",
    ]
    assert main(["--check", "--root", str(repo)]) == 1
    assert capsys.readouterr().err.splitlines() == [check_pages(repo)[0], "2 problem(s) in the generated tables and values in all"]


def test_unknown_names_and_unpaired_markers_are_reported_and_nothing_is_written(repo):
    broken = ("intro\n<!-- report:no-such-table:start -->\n<!-- report:no-such-table:end -->\n"
              "<!-- report:classification-test:end -->\n<!-- report:classification-epochs:start -->\n"
              "<!-- report:classification-test:stop -->\n")
    (repo / "docs/broken.md").write_text(broken, encoding="utf-8")
    (repo / "README.md").write_text("# fake\n\n<!-- report:classification-epochs:start -->\n"
                                    "<!-- report:classification-epochs:end -->\n", encoding="utf-8")
    problems = check_pages(repo)
    assert problems[0].startswith("README.md:3: table 'classification-epochs' differs")  # README first, then docs/
    assert problems[1:5] == [
        "docs/broken.md:2: unknown table 'no-such-table'; known: " + ", ".join(TABLES)
        + ", and bench.NAME for each benchmarks/results/NAME.json",
        "docs/broken.md:4: table 'classification-test': end marker without a start marker",
        "docs/broken.md:5: table 'classification-epochs': start marker without an end marker",
        "docs/broken.md:6: malformed marker: expected `<!-- report:NAME:start -->` or `...:end -->`",
    ]
    assert problems[5].startswith("docs/results/classification.md:3: ") and len(problems) == 7  # in path order
    with pytest.raises(PagesError):
        write_pages(repo)
    assert "| old | table |" in _page(repo).read_text(encoding="utf-8")  # the fixable page is left alone too


def test_markers_in_fenced_code_are_text(repo):
    write_pages(repo)
    (repo / "docs/how.md").write_text("Wrap a table so:\n\n```markdown\n<!-- report:NAME:start -->\n```\n",
                                      encoding="utf-8")
    assert check_pages(repo) == []


def test_generate_names_the_known_tables_for_an_unknown_one(repo):
    with pytest.raises(KeyError, match="unknown table 'classification'; known: classification-test, "):
        generate("classification", repo)


@pytest.mark.parametrize("damage, reason", [
    (lambda repo: (repo / "metrics/baseline.json").unlink(), "metrics/baseline.json is missing"),
    (lambda repo: (repo / "metrics/baseline.json").write_text("{", encoding="utf-8"),
     "metrics/baseline.json is not JSON"),
    (lambda repo: _write_json(repo / "metrics/evaluate.json", _evaluate(p_value=float("nan"))),
     "metrics/evaluate.json: 'gap.p_value' is nan, not a finite number"),
    (lambda repo: _write_json(repo / "metrics/evaluate.json", {**_evaluate(), "gap": {}}),
     "metrics/evaluate.json has no 'gap.accuracy_mean'"),
])
def test_unreadable_metrics_are_reported_with_file_and_key(repo, damage, reason):
    damage(repo)
    first = check_pages(repo)[0]
    assert first.startswith("docs/results/classification.md:3: table 'classification-test' cannot be generated: ")
    assert reason in first


def _objective_run(root: Path, folder: str, pretrain: dict, gap: float) -> None:
    _write_json(root / folder / "evaluate.json",
                {**_evaluate(gap=gap, p_value=0.07), "pretraining": {"val_perplexity": 250.04, **pretrain}})


def test_objectives_table_reads_each_run_and_refuses_a_mislabelled_one(tmp_path):
    _write_json(tmp_path / "metrics/baseline.json", {"accuracy": 0.8, "macro_f1": 0.799, "valid_accuracy": 0.79})
    _objective_run(tmp_path, "results/objectives/clm", {"objective": "clm", "next_sentence": False}, 0.1)
    _objective_run(tmp_path, "results/objectives/mlm", {"objective": "mlm", "next_sentence": False,
                                                        "val_masked_accuracy": 0.1234}, -0.02)
    nsp = {"objective": "mlm", "next_sentence": True, "val_masked_accuracy": 0.11, "val_nsp_accuracy": 0.5}
    _objective_run(tmp_path, "results/objectives/mlm-nsp", nsp, 0.0)
    lines = generate("objectives", tmp_path).splitlines()
    assert lines[0] == ("| objective | LM validation perplexity | epoch-1 validation, pretrained vs scratch | "
                        "epoch 2 | epoch 3 | test, pretrained | test, scratch | gap, 95% CI, p |")
    assert lines[2] == ("| `clm` (the earlier default recipe) | 250.0 (next-token) | 0.6500 vs 0.6600 | 0.6800 vs 0.6700 | "
                        "0.6900 vs 0.6750 | **0.7000 ± 0.0100** | 0.6000 ± 0.0300 | "
                        "+0.1000 [+0.0500, +0.1500], p = 0.0700 |")
    assert lines[3].startswith("| `mlm` | 250.0 (masked acc 0.123) |") and "| -0.0200 [-0.0700, +0.0300]" in lines[3]
    assert lines[4].startswith("| `mlm` + NSP | 250.0 (masked acc 0.110, NSP acc 0.500) |")
    assert lines[5] == "| TF-IDF + logistic regression | | 0.7900 | | | 0.8000 | | |"
    _objective_run(tmp_path, "results/objectives/mlm-nsp", {**nsp, "next_sentence": False}, 0.0)
    with pytest.raises(ValueError, match="records objective 'mlm', next_sentence False; the row `mlm` \\+ NSP needs"):
        generate("objectives", tmp_path)


def _scores(bleu: float, chrf: float) -> dict:
    scores: dict = {}
    for metric, mean in (("bleu", bleu), ("chrf", chrf)):
        scores |= {f"{metric}_mean": mean, f"{metric}_std": 0.25, f"{metric}_ci95_low": mean - 0.5,
                   f"{metric}_ci95_high": mean + 0.5, f"{metric}_per_seed": [mean - 1, mean + 1]}
    return scores


def test_translation_tables_bold_the_better_variant_per_metric(tmp_path):
    gap = {"bleu_mean": 1.0, "bleu_ci95_low": 0.5, "bleu_ci95_high": 1.5, "bleu_p_value": 0.000999,
           "chrf_mean": -0.5, "chrf_ci95_low": -1.25, "chrf_ci95_high": 0.25, "chrf_p_value": 0.6}
    part = {"n_test_sentences": 12345, "pretrained": _scores(3.0, 20.0), "scratch": _scores(2.0, 20.5), "gap": gap,
            "baseline": {"copy_source_bleu": 0.19, "copy_source_chrf": 17.849}}
    _write_json(tmp_path / "translation/metrics/evaluate.json", {**part, "clauses": {**part, "n_test_sentences": 7}})
    assert generate("translation-test", tmp_path) == """\
| test set: 12,345 verses | BLEU | per run | chrF | per run |
|---|---|---|---|---|
| pretrained, then fine-tuned | **3.00 ± 0.25** [2.50, 3.50] | 2.00, 4.00 | 20.00 ± 0.25 [19.50, 20.50] | 19.00, 21.00 |
| same network from scratch | 2.00 ± 0.25 [1.50, 2.50] | 1.00, 3.00 | **20.50 ± 0.25** [20.00, 21.00] | 19.50, 21.50 |
| **gap** (pretrained − scratch) | **+1.00** [+0.50, +1.50], p = 0.001 | | **-0.50** [-1.25, +0.25], p = 0.600 | |
| baseline: the English source copied | 0.19 | | 17.85 | |
"""
    clauses = generate("translation-clauses", tmp_path).splitlines()
    assert clauses[0].startswith("| short test sentences: 7 clause pairs of the test verses | BLEU |")
    assert clauses[4].startswith("| **gap** | **+1.00**") and clauses[5].startswith("| baseline: the source copied |")


LABEL_CURVE_TSV = """\
labels\tn_train\tpretrained\tscratch\tpretrained_std\tscratch_std\tgap\tgap_low\tgap_high\tp_value\tbaseline
100\t100\t0.61\t0.55\t0.02\t0.03\t0.06\t0.01\t0.11\t0.00001\t0.58
all\t7397\t0.78\t0.79\t0.004\t0.005\t-0.01\t-0.02\t0.0\t0.2\t0.8008
"""


def test_one_pretraining_run_gets_no_share_of_the_gaps_variance(repo):
    """One run has no spread: the row names the fine-tuning seeds and test sentences alone."""
    _write_json(repo / "metrics/evaluate.json", {**_evaluate(), "n_pretraining_runs": 1, "n_finetuning_seeds": 3})
    row = next(line for line in generate("classification-test", repo).splitlines() if "variance" in line)
    assert "| fine-tuning seeds 0%, test sentences 60% |" in row and "pretraining" not in row
    assert "over 1 pretraining run × 3 fine-tuning seeds" in generate("classification-test", repo)


def test_a_pipeline_of_reviews_names_its_test_reviews_in_the_share_row(repo):
    """The IMDb and course tables count reviews, not sentences: in the header and in the variance row alike."""
    _write_json(repo / "results/imdb-cpu/metrics/evaluate.json", {**_evaluate(), "n_pretraining_runs": 1})
    _write_json(repo / "results/imdb-cpu/metrics/baseline.json", {"accuracy": 0.9, "macro_f1": 0.9})
    lines = generate("imdb-cpu-test", repo).splitlines()
    assert lines[0].startswith("| test set, ") and " reviews | accuracy" in lines[0]
    assert "test reviews 60%" in next(line for line in lines if "variance" in line)
    assert "sentences" not in "".join(lines)


@pytest.mark.parametrize("name", sorted(RESULT_RUNS))
def test_each_committed_run_has_its_files_and_a_label_curve_only_where_it_ran_one(name):
    """A run under results/ is read by its name: its README, run.json and reports are committed, and its label curve
    table exists exactly when the run wrote a label curve (a stale flag would hide a curve or break a table)."""
    run = RESULT_RUNS[name]
    folder = REPO / run.folder
    for rel in ("README.md", "run.json", EVALUATE, BASELINE):
        assert (folder / rel).is_file(), f"{run.folder}{rel}"
    assert (folder / LABEL_CURVE).is_file() == run.label_curve
    assert f"{name}-test" in TABLES and (f"{name}-labels" in TABLES) == run.label_curve
    assert f"{run.texts} |" in generate(f"{name}-test", REPO).splitlines()[0]


def test_the_label_curve_table_has_a_row_per_size_and_names_a_broken_cell(tmp_path):
    _write_json(tmp_path / "results/reviews-cpu/metrics/evaluate.json", {**_evaluate(), "n_finetuning_seeds": 3})
    curve = tmp_path / "results/reviews-cpu/metrics/evaluate/label_curve.tsv"
    curve.parent.mkdir(parents=True)
    curve.write_text(LABEL_CURVE_TSV, encoding="utf-8")
    assert generate("reviews-cpu-labels", tmp_path) == """\
| labeled training examples | pretrained (mean ± std, 2 pretraining runs × 3 fine-tuning seeds) | from scratch | gap [95% CI], p | TF-IDF on the same examples |
|---|---|---|---|---|
| 100 | **0.6100 ± 0.0200** | 0.5500 ± 0.0300 | +0.0600 [+0.0100, +0.1100], p < 0.0001 | 0.5800 |
| all (7,397) | 0.7800 ± 0.0040 | **0.7900 ± 0.0050** | -0.0100 [-0.0200, +0.0000], p = 0.2000 | 0.8008 |
"""
    curve.write_text(LABEL_CURVE_TSV.replace("0.61", "nan%"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"results/reviews-cpu/metrics/evaluate/label_curve.tsv, line 2: a cell is not"):
        generate("reviews-cpu-labels", tmp_path)
    curve.unlink()
    with pytest.raises(ValueError, match=r"results/reviews-cpu/metrics/evaluate/label_curve.tsv is missing"):
        generate("reviews-cpu-labels", tmp_path)


EXPECTED_HEADERS = {
    "classification-test": "| test set, {n} sentences | accuracy (mean ± std over ",
    "classification-epochs": "| validation accuracy (mean of {n} runs) | epoch 1 |",
    "course-test": "| test set, {n} reviews | accuracy (mean ± std over ",
    "course-epochs": "| validation accuracy (mean of {n} runs) | epoch 1 |",
    "objectives": "| objective | LM validation perplexity | epoch-1 validation, pretrained vs scratch |",
    "reviews-cpu-test": "| test set, {n} sentences | accuracy (mean ± std over ",
    "reviews-cpu-labels": "| labeled training examples | pretrained (mean ± std, ",
    "imdb-cpu-test": "| test set, {n} reviews | accuracy (mean ± std over ",
    "imdb-cpu-labels": "| labeled training examples | pretrained (mean ± std, ",
    "translation-test": "| test set: {n} verses | BLEU | per run | chrF | per run |",
    "translation-clauses": "| short test sentences: {n} clause pairs of the test verses | BLEU |",
    "translation-epochs": "| validation (mean of {n} runs) | loss, epoch 1 |",
    "translation-lab": "| English | reference | pretrained (run 0-0) | chrF | scratch (run 0-0) | chrF |",
    "scaling": "| pretraining budget | tokens (corpus + adaptation) | LM val. perplexity | pretrained (mean ± std, {n} seeds) |",
    "scaling-trend": "| fitted against log10(pretraining tokens) | slope per 10x tokens [95% CI] | R² |",
    "vendor-references": "| CPU | pretraining runs × fine-tuning seeds | pretrained | scratch | gap [95% CI] |",
    "environment": "| variable | takes | unset | what it does |\n|---|---|---|---|\n| `LMTRANSFER_CACHE_DIR` |",
}
HEADER_COUNTS = {  # where the header's count comes from
    "classification-test": ("metrics/evaluate.json", ["n_test_examples"]),
    "classification-epochs": ("metrics/evaluate.json", ["n_seeds"]),
    "course-test": ("results/course/metrics/evaluate.json", ["n_test_examples"]),
    "course-epochs": ("results/course/metrics/evaluate.json", ["n_seeds"]),
    "objectives": ("results/objectives/clm/evaluate.json", ["n_seeds"]),
    "reviews-cpu-test": ("results/reviews-cpu/metrics/evaluate.json", ["n_test_examples"]),
    "imdb-cpu-test": ("results/imdb-cpu/metrics/evaluate.json", ["n_test_examples"]),
    "translation-test": ("translation/metrics/evaluate.json", ["n_test_sentences"]),
    "translation-clauses": ("translation/metrics/evaluate.json", ["clauses", "n_test_sentences"]),
    "translation-epochs": ("translation/metrics/evaluate.json", ["n_seeds"]),
    "translation-lab": ("translation/metrics/evaluate.json", ["n_seeds"]),
    "scaling": ("results/scaling/summary.json", ["budgets", 0, "n_seeds"]),
    "scaling-trend": ("results/scaling/summary.json", ["budgets", 0, "n_seeds"]),
    "vendor-references": ("results/reference/GenuineIntel.json", ["n_pretraining_runs"]),
}


def test_every_table_name_has_an_expected_header():
    assert set(EXPECTED_HEADERS) == set(TABLES)
    assert {name for name, header in EXPECTED_HEADERS.items() if "{n}" in header} <= set(HEADER_COUNTS)
    assert set(HEADER_COUNTS) <= set(EXPECTED_HEADERS)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_each_table_from_the_committed_metrics_round_trips_through_a_page(name, tmp_path):
    """The repository's own metrics: the table generates, has its header, and a page holding it checks clean."""
    table = generate(name, REPO)
    count = 0
    if name in HEADER_COUNTS:
        source, keys = HEADER_COUNTS[name]
        count = json.loads((REPO / source).read_text(encoding="utf-8"))
        for key in keys:
            count = count[key]
    assert table.startswith(EXPECTED_HEADERS[name].format(n=f"{count:,}"))
    lines = table.splitlines()
    assert len(lines) >= 3 and lines[1] == "|" + "---|" * lines[0].count(" | ") + "---|"
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[2:])
    for folder in ("metrics", "results", "translation", "course"):
        (tmp_path / folder).symlink_to(REPO / folder)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/page.md").write_text(f"<!-- report:{name}:start -->\n\n{table}\n<!-- report:{name}:end -->\n",
                                           encoding="utf-8")
    assert check_pages(tmp_path) == []


def test_the_repositorys_own_pages_match_the_committed_metrics():
    """What `lmtransfer report --check` (and `make docs`) keeps true: every results table of README.md and docs/."""
    assert sum(page.read_text(encoding="utf-8").count("<!-- report:") for page in pages(REPO)) >= 2 * len(TABLES)
    assert check_pages(REPO) == []


def _bench(tmp_path: Path):
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import results_file
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return results_file


def test_a_benchmarks_result_file_becomes_its_table_with_machine_and_command(tmp_path, monkeypatch):
    results_file = _bench(tmp_path)
    monkeypatch.setattr(results_file, "RESULTS", tmp_path / "benchmarks" / "results")
    monkeypatch.setattr(results_file, "REPO", tmp_path)
    path = results_file.write_result(
        "demo", [results_file.Column("stage"), results_file.Column("wall s", ",.1f")],
        [["pretrain", 1234.56], ["plot", None]], seconds=1300.2, notes="alone", command="python benchmarks/demo.py")
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["machine"]["cores"] and written["rows"] == [["pretrain", 1234.56], ["plot", None]]
    table = generate("bench.demo", tmp_path)
    caption, _, body = table.partition("\n\n")
    assert caption.startswith("`python benchmarks/demo.py` on ") and caption.endswith(": 1,300 s; alone.")
    assert body == "| stage | wall s |\n|---|---|\n| pretrain | 1,234.6 |\n| plot | |\n"


def test_a_missing_or_broken_benchmark_result_is_named(tmp_path):
    with pytest.raises(ValueError, match="benchmarks/results/none.json is missing"):
        generate("bench.none", tmp_path)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "nan.json").write_text(json.dumps({
        "command": "x", "machine": {}, "seconds": 1, "notes": "", "columns": [{"name": "a", "format": ".1f"}],
        "rows": [[float("nan")]]}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"nan.json: rows\[0\] 'a' is nan"):
        generate("bench.nan", tmp_path)


def test_a_benchmark_writes_whole_rows_or_nothing(tmp_path, monkeypatch):
    results_file = _bench(tmp_path)
    monkeypatch.setattr(results_file, "RESULTS", tmp_path)
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        results_file.write_result("bad", [results_file.Column("a"), results_file.Column("b")], [[1]], seconds=1)
    assert not list(tmp_path.iterdir())
