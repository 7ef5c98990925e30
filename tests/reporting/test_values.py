"""Numbers stated in the docs' sentences: each marked with its result file, rewritten by `lmtransfer report` and
named by page and line in `lmtransfer report --check` when it differs from the file."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lmtransfer.reporting import values
from lmtransfer.reporting.pages import PagesError, check_pages, main, pages, write_pages

REPO = Path(__file__).resolve().parents[2]
RESULT_FOLDERS = ("metrics", "results", "translation", "course", "benchmarks")


def V(key: str, text: str) -> str:
    return f"<!-- value:{key} -->{text}<!-- /value -->"


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


BENCH = {"command": "python benchmarks/demo.py", "machine": {"cpu": "AMD EPYC", "cores": 2}, "seconds": 776.0,
         "notes": "", "columns": [{"name": "loop", "format": ""}, {"name": "seed", "format": ""},
                                  {"name": "wall time, s", "format": ",.1f"}],
         "rows": [["course", 0, 158.7], ["course", 1, 160.6], ["ours", 0, 35.3], ["course, 3 seeds", "mean", "x"]]}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A README and a results page stating values of a metrics file and a benchmark's table."""
    _write_json(tmp_path / "metrics/evaluate.json", {
        "gap": {"accuracy_mean": 0.04716, "share": {"pretraining_runs": 0.8135}},
        "pretrained": {"accuracy_per_seed": [0.6626, 0.6947, 0.6635], "val_accuracy_mean_per_epoch": [0.61, 0.65]},
        "n_test_examples": 2113, "base": {"pretrain.max_steps": 500}})
    _write_json(tmp_path / "metrics/baseline.json", {"accuracy": 0.80076})
    _write_json(tmp_path / "benchmarks/results/demo.json", BENCH)
    (tmp_path / "README.md").write_text(
        "# fake\n\n"
        f"It took {V('bench.demo:seconds:,.0f', '')} s ({V('bench.demo:seconds:duration', '')}) on a\n"
        f"{V('bench.demo:machine.cpu', '')}.\n", encoding="utf-8")
    page = tmp_path / "docs/results/page.md"
    page.parent.mkdir(parents=True)
    page.write_text(
        "# Results\n\n"
        f"The gap is {V('evaluate:gap.accuracy_mean:+.4f', '?')} ({V('evaluate:gap.accuracy_mean:pt+.1f', '?')} points),\n"
        f"{V('evaluate:gap.share.pretraining_runs:.0%', '?')} of it the pretraining runs; the runs score from\n"
        f"{V('evaluate:pretrained.accuracy_per_seed:low.3f', '?')} to {V('evaluate:pretrained.accuracy_per_seed:high.3f', '?')}.\n"
        "\n```markdown\nshown, not checked: <!-- value:evaluate:gap.accuracy_mean:+.4f -->0<!-- /value -->\n```\n",
        encoding="utf-8")
    return tmp_path


def _page(repo: Path) -> Path:
    return repo / "docs/results/page.md"


def test_report_writes_every_value_from_its_file(repo):
    assert sorted(write_pages(repo)) == [repo / "README.md", _page(repo)]
    assert (repo / "README.md").read_text(encoding="utf-8") == (
        "# fake\n\n"
        f"It took {V('bench.demo:seconds:,.0f', '776')} s ({V('bench.demo:seconds:duration', '12 min 56 s')}) on a\n"
        f"{V('bench.demo:machine.cpu', 'AMD EPYC')}.\n")
    text = _page(repo).read_text(encoding="utf-8")
    assert f"The gap is {V('evaluate:gap.accuracy_mean:+.4f', '+0.0472')} ({V('evaluate:gap.accuracy_mean:pt+.1f', '+4.7')} points)" in text
    assert V("evaluate:gap.share.pretraining_runs:.0%", "81%") in text
    assert f"{V('evaluate:pretrained.accuracy_per_seed:low.3f', '0.663')} to" in text
    assert "-->0<!-- /value -->\n```" in text  # fenced code is text
    assert check_pages(repo) == []
    assert write_pages(repo) == []


def test_an_edited_number_fails_the_check_with_page_and_line_and_report_restores_it(repo, capsys):
    write_pages(repo)
    fresh = _page(repo).read_text(encoding="utf-8")
    _page(repo).write_text(fresh.replace("-->81%<", "-->71%<"), encoding="utf-8")
    assert check_pages(repo) == [
        "docs/results/page.md:4: value 'evaluate:gap.share.pretraining_runs:.0%' is '71%' here, "
        "metrics/evaluate.json gives '81%'; run `lmtransfer report`"]
    assert main(["--check", "--root", str(repo)]) == 1
    assert capsys.readouterr().err.startswith("docs/results/page.md:4: value 'evaluate:gap.share.pretraining_runs")
    assert main(["--root", str(repo)]) == 0
    assert _page(repo).read_text(encoding="utf-8") == fresh


def test_a_changed_result_file_makes_the_stated_number_stale(repo):
    write_pages(repo)
    _write_json(repo / "metrics/evaluate.json", {**json.loads((repo / "metrics/evaluate.json").read_text()),
                                                 "gap": {"accuracy_mean": 0.05, "share": {"pretraining_runs": 0.8}}})
    assert [problem.split(": value ")[0] for problem in check_pages(repo)] == ["docs/results/page.md:3"] * 2 + [
        "docs/results/page.md:4"]
    write_pages(repo)
    assert V("evaluate:gap.accuracy_mean:+.4f", "+0.0500") in _page(repo).read_text(encoding="utf-8")


@pytest.mark.parametrize("key, text", [
    ("evaluate:n_test_examples:,", "2,113"),
    ("evaluate:n_test_examples", "2,113"),
    ("evaluate:gap.accuracy_mean", "0.04716"),
    ("evaluate:pretrained.accuracy_per_seed.-1:.4f", "0.6635"),
    ("evaluate:pretrained.val_accuracy_mean_per_epoch:len", "2"),
    ("evaluate:base.pretrain.max_steps", "500"),  # a key that holds dots
    ("baseline:accuracy:.2f", "0.80"),
    ("bench.demo:ours/wall time, s:.0f", "35"),
    ("bench.demo:course/1/wall time, s", "160.6"),
    ("bench.demo:course, 3 seeds/wall time, s", "x"),
])
def test_paths_and_formats(repo, key, text):
    assert values.resolve(key, values.Reader(repo)) == text


def test_a_runs_timings_folder_is_one_source_keyed_by_file(repo):
    """results/reviews-cpu/timings/: each stage's file under its name, so a page can state each pretraining run's
    time; a folder missing or without a file is named, not read as nothing."""
    with pytest.raises(ValueError, match=r"^results/reviews-cpu/timings/ is missing$"):
        values.resolve("reviews-cpu-timings:pretrain_seed1.seconds", values.Reader(repo))
    (repo / "results/reviews-cpu/timings").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"^results/reviews-cpu/timings/ holds no timing file$"):
        values.resolve("reviews-cpu-timings:pretrain_seed1.seconds", values.Reader(repo))
    _write_json(repo / "results/reviews-cpu/timings/pretrain_seed1.json", {"seconds": 2531.6})
    _write_json(repo / "results/reviews-cpu/timings/pretrain_seed2.json", {"seconds": 2490.2})
    read = values.Reader(repo)
    assert values.resolve("reviews-cpu-timings:pretrain_seed1.seconds:,.0f", read) == "2,532"
    assert values.resolve("reviews-cpu-timings:pretrain_seed2.seconds:duration", read) == "41 min 30 s"
    with pytest.raises(ValueError, match=r"results/reviews-cpu/timings/ has no 'pretrain_seed3.seconds'"):
        values.resolve("reviews-cpu-timings:pretrain_seed3.seconds", read)


@pytest.mark.parametrize("key, message", [
    ("nope:gap", "unknown source 'nope'; known: evaluate, baseline,"),
    ("evaluate:gap.nope:.2f", "metrics/evaluate.json has no 'gap.nope'"),
    ("bench.demo:course/wall time, s", "2 rows whose leading cells are 'course'"),
    ("bench.demo:ours/minutes", "has no column 'minutes'"),
    ("bench.none:seconds", "benchmarks/results/none.json is missing"),
    ("evaluate:gap:.2f", "metrics/evaluate.json: 'gap' is {"),
    ("bench.demo:machine.cpu:.2f", "is the text 'AMD EPYC', which takes no format"),
    ("derived:nope", "unknown derived value 'nope'; known: "),
])
def test_an_unreadable_value_is_named(repo, key, message):
    with pytest.raises((KeyError, ValueError)) as raised:
        values.resolve(key, values.Reader(repo))
    assert message in str(raised.value)


def test_broken_markers_are_reported_and_nothing_is_written(repo):
    (repo / "README.md").write_text(
        "# fake\n"
        f"{V('evaluate:gap.nope:.2f', '1')} and {V('bench.demo:seconds:,.0f', '1')}\n"
        "a marker cut by a line break <!-- value:evaluate:gap.accuracy_mean:+.4f -->+0.04\n"
        "`<!-- value:shown -->` in a code span is text\n", encoding="utf-8")
    problems = check_pages(repo)
    assert problems[:3] == [
        "README.md:2: value 'bench.demo:seconds:,.0f' is '1' here, benchmarks/results/demo.json gives '776'; "
        "run `lmtransfer report`",
        "README.md:2: value 'evaluate:gap.nope:.2f' cannot be read: metrics/evaluate.json has no 'gap.nope'",
        "README.md:3: malformed value marker: expected `<!-- value:SOURCE:PATH:FORMAT -->TEXT<!-- /value -->`, "
        "on one line",
    ]
    assert all(problem.startswith("docs/results/page.md:") for problem in problems[3:])
    with pytest.raises(PagesError):
        write_pages(repo)
    assert "-->?<!-- /value -->" in _page(repo).read_text(encoding="utf-8")


def test_every_source_and_derived_value_reads_the_committed_files():
    read = values.Reader(REPO)
    for name in [*values.SOURCES, *values.COMPUTED]:
        assert read.source(name).data, name
    for name, derived in values.DERIVED.items():
        assert isinstance(derived.compute(read), float), name
        assert all((REPO / values.files_of(f"{source}:x")[0]).exists() for source in derived.sources), name


# --- the repository's own pages -----------------------------------------------------------------------------------

RESULTS_PAGES = sorted(path.relative_to(REPO).as_posix() for path in (REPO / "docs/results").glob("*.md"))
CHECKED_PAGES = ["README.md", *(page for page in RESULTS_PAGES if page != "docs/results/speed.md")]


def _copy_of_the_docs(tmp_path: Path) -> Path:
    """README.md and docs/ copied (they are edited), the result files linked (they are only read)."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png"))
    for folder in RESULT_FOLDERS:
        (tmp_path / folder).symlink_to(REPO / folder)
    return tmp_path


def _edited(text: str) -> str:
    """The stated text with its last digit changed, as a hand edit would (a text value gets a letter more)."""
    digits = [i for i, char in enumerate(text) if char.isdigit()]
    if not digits:
        return text + "x"
    at = digits[-1]
    return text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:]


@pytest.mark.parametrize("page", CHECKED_PAGES)
def test_each_stated_number_of_the_repositorys_pages_is_checked(page, tmp_path):
    """Every marked number of README and each results page: edited by hand in a copy, `report --check` fails
    naming this page and line, and `report` restores the committed text."""
    root = _copy_of_the_docs(tmp_path)
    path = root / page
    committed = path.read_text(encoding="utf-8")
    lines = committed.split("\n")
    marked = [(index, match) for index, line in enumerate(lines) for match in values.VALUE.finditer(line)]
    assert marked, f"{page}: its stated results carry value markers"
    for index, match in marked[::max(1, len(marked) // 8)]:  # a spread of them: each check reads every page
        edited = lines[:index] + [lines[index][:match.start("text")] + _edited(match["text"])
                                  + lines[index][match.end("text"):]] + lines[index + 1:]
        path.write_text("\n".join(edited), encoding="utf-8")
        problems = check_pages(root)
        assert len(problems) == 1 and problems[0].startswith(f"{page}:{index + 1}: value '{match['key'].strip()}'"), \
            problems
        write_pages(root)
        assert path.read_text(encoding="utf-8") == committed


@pytest.mark.slow
def test_the_cli_check_names_page_and_line(tmp_path):
    root = _copy_of_the_docs(tmp_path)
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    match = re.search(r"(<!-- value:bench\.pipeline:dvc repro, wall/wall time, s:,\.0f -->)([\d,]+)", text)
    assert match, "README states the pipeline's run time as a value"
    readme.write_text(text[:match.start(2)] + "399" + text[match.end(2):], encoding="utf-8")
    line = text[:match.start()].count("\n") + 1
    done = subprocess.run([sys.executable, "-m", "lmtransfer.cli", "report", "--check", "--root", str(root)],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert f"README.md:{line}: value 'bench.pipeline:dvc repro, wall/wall time, s:,.0f' is '399' here" in done.stderr
    subprocess.run([sys.executable, "-m", "lmtransfer.cli", "report", "--root", str(root)], check=True,
                   capture_output=True)
    assert readme.read_text(encoding="utf-8") == text


UNMARKED = re.compile(r"(?<![\w.])[+-]?\d+\.\d{2,}(?![\w.])")  # 0.674, +0.0472: a result, but for CONSTANTS
CONSTANTS = {"3.11": "the Python version README requires", "0.05": "the significance level",
             "0.01": "a weight decay of the recipe"}


def _unmarked_decimals(text: str) -> list[str]:
    """`line: number` for each decimal of two places or more in a sentence that no value marker holds (tables,
    generated or hand-made, fenced code and code spans aside)."""
    lines = text.split("\n")
    fenced, found = False, []
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or line.lstrip().startswith(("|", "`python", "<!--")):
            continue
        prose = re.sub(r"`[^`]*`", "", values.VALUE.sub("", line))
        found += [f"{number}: {hit}" for hit in UNMARKED.findall(prose) if hit not in CONSTANTS]
    return found


@pytest.mark.parametrize("page", [*CHECKED_PAGES, "docs/guide/development.md"])
def test_no_result_is_stated_in_a_sentence_without_its_marker(page):
    assert _unmarked_decimals((REPO / page).read_text(encoding="utf-8")) == []


def test_every_page_is_read():
    assert {path.relative_to(REPO).as_posix() for path in pages(REPO)} >= set(CHECKED_PAGES)
