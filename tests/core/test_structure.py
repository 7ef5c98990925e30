"""The code's shape: one package per task over a shared core, dvc.yaml's deps are each stage's import closure,
and no module imports in a circle."""

from __future__ import annotations

import re

import pytest
from ruamel.yaml import YAML

from import_closure import EXEMPT, PIPELINES, REPO, SRC, closure_files, dep_prefix, imported_modules, module_file

STAGES = YAML(typ="safe").load((REPO / "dvc.yaml").read_text())["stages"]
# every pipeline's stages, as (pipeline, stage): deps written relative to the pipeline's folder
ALL_STAGES = {(pipeline.relative_to(REPO).as_posix(), name): (dep_prefix(pipeline), stage)
              for pipeline in PIPELINES for name, stage in YAML(typ="safe").load(pipeline.read_text())["stages"].items()}


def _declared_sources(deps: list[str], prefix: str = "") -> set[str]:
    """Project source files a stage declares; a folder stands for every .py file in it."""
    files: set[str] = set()
    for dep in deps:
        dep = dep.removeprefix(prefix)
        path = REPO / dep
        if not dep.startswith("src/"):
            continue
        if path.is_dir():
            files |= {p.relative_to(REPO).as_posix() for p in path.rglob("*.py")}
        else:
            files.add(dep)
    return files


@pytest.mark.parametrize("pipeline_stage", sorted(ALL_STAGES), ids="{0[0]}:{0[1]}".format)
def test_every_module_a_stage_can_run_is_one_of_its_deps(pipeline_stage):
    stage = pipeline_stage[1]
    prefix, definition = ALL_STAGES[pipeline_stage]
    script = definition["cmd"].split()[1]
    assert script in definition["deps"], f"{stage}: its own script {script} is not a dep"
    needed = closure_files(REPO / script.removeprefix(prefix))
    declared = _declared_sources(definition["deps"], prefix)
    missing, needless = sorted(needed - declared), sorted(declared - needed)
    hint = "run `python tools/import_closure.py` for the right list"
    assert not missing, f"{stage} imports these but dvc.yaml does not list them (edits would not rerun it): {missing}; {hint}"
    assert not needless, f"{stage} lists these but never imports them (edits rerun it for nothing): {needless}; {hint}"


@pytest.mark.parametrize("folder", ["course", "reviews", "imdb"])
def test_a_folder_pipeline_is_the_classification_pipeline_run_in_its_folder(folder):
    """course/, reviews/ and imdb/dvc.yaml are generated from dvc.yaml: a stage added or changed there reaches them."""
    from folder_pipelines import FOLDERS, SOURCE, folder_pipeline

    target = REPO / folder / "dvc.yaml"
    assert target.read_text(encoding="utf-8") == folder_pipeline(SOURCE.read_text(encoding="utf-8"), FOLDERS[folder]), (
        f"{folder}/dvc.yaml is stale: python tools/folder_pipelines.py")
    stages = YAML(typ="safe").load(target.read_text())["stages"]
    assert stages.keys() == STAGES.keys()
    for name, stage in stages.items():
        assert [d.removeprefix("../") for d in stage["deps"]] == STAGES[name]["deps"]
        assert stage["cmd"].replace("../", "", 1) == STAGES[name]["cmd"]


def test_the_closure_follows_function_level_and_relative_imports(tmp_path):
    """The check itself: a module imported inside a function, and `from . import x`, count."""
    script = tmp_path / "stage.py"
    script.write_text("def main():\n    from lmtransfer.cli.main import main as cli\n")
    files = closure_files(script)
    assert "src/lmtransfer/cli/main.py" in files and "src/lmtransfer/core/paths.py" in files  # `from x import paths`
    assert "src/lmtransfer/pretraining/generation.py" in files  # imported inside cmd_generate
    assert "src/lmtransfer/__init__.py" in files  # a package's __init__ runs on import
    assert not any(f.startswith(f"src/{EXEMPT.replace('.', '/')}/") for f in files)


def _all_modules() -> list[str]:
    return sorted(".".join(p.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
                  for p in SRC.rglob("*.py"))


def test_no_module_imports_in_a_circle():
    """Counting function-level imports too: a cycle broken only by a local import is still a cycle."""
    graph = {m: {i for i in imported_modules(module_file(m), m) if i != m} for m in _all_modules()}
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                cycle = trail[trail.index(target):] + [target] if target in trail else [module, target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, trail + [target])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])


def test_stage_scripts_stay_thin():
    """A stage script reads its params and calls one function of its task (or of pretraining); it writes nothing and
    logs nothing itself (tracking goes through harness.tracking, from the library)."""
    scripts = sorted((REPO / "stages").rglob("*.py"))
    assert {p.parent.name for p in scripts} == {"stages", "translation"}  # translation's scripts in a folder of their own
    for script in scripts:
        text = script.read_text()
        assert len(text.splitlines()) <= 30, f"{script.relative_to(REPO)}: move its logic into src/lmtransfer/"
        assert "import mlflow" not in text and not re.search(r"\b(write_\w*|stage_run)\(", text), script.name
        assert "for epoch" not in text and ".backward(" not in text, script.name


def test_each_stored_format_has_one_home():
    """File names of the prepared and tokenized folders are spelled in one module each."""
    for needle, home in (('"corpus_{part}.txt"', "data/prepared.py"), ('f"{name}.npz"', "tokens/id_files.py"),
                         ('f"corpus_{part}.npy"', "tokens/id_files.py")):
        holders = [p.relative_to(SRC / "lmtransfer").as_posix() for p in SRC.rglob("*.py") if needle in p.read_text()]
        assert holders == [home], f"{needle} spelled in {holders}"
    sources = [p for p in list(SRC.rglob("*.py")) + list((REPO / "stages").glob("*.py"))]
    for pattern in ("np.savez(", "np.load(", "torch.load("):
        users = sorted(p.name for p in sources if pattern in p.read_text())
        allowed = {"np.savez(": ["id_files.py"], "np.load(": ["id_files.py"], "torch.load(": ["checkpoint.py"]}
        assert users == allowed[pattern], f"{pattern} used in {users}"


# --- data dependencies: each stage depends on what it reads, and nothing else ----------------------------------

CORPUS_OUTPUTS = {"data/prepared_corpus", "data/tokenized_corpus"}


def _data_deps(stage: str) -> set[str]:
    return {dep for dep in STAGES[stage]["deps"] if dep.startswith(("data/", "models/", "metrics/"))}


def _outs(stage: str) -> set[str]:
    entries = [*STAGES[stage].get("outs", []), *STAGES[stage].get("metrics", []), *STAGES[stage].get("plots", [])]
    return {next(iter(entry)) if isinstance(entry, dict) else entry for entry in entries}


def test_the_corpus_is_an_output_of_its_own_so_a_corpus_change_reaches_only_pretraining():
    """A corpus change reran the scratch fine-tune (257 s for bit-identical results) while data/tokenized held both."""
    assert CORPUS_OUTPUTS <= _outs("prepare") | _outs("tokenize")
    assert _data_deps("pretrain") >= {"data/tokenized", "data/tokenized_corpus"}
    for stage in ("finetune_pretrained", "finetune_scratch", "baseline", "evaluate", "plot"):
        deps = _data_deps(stage)
        assert not deps & CORPUS_OUTPUTS, f"{stage} depends on the corpus it never reads: {deps & CORPUS_OUTPUTS}"
        assert not any(dep == "data" or dep.startswith("data/inputs/data") for dep in deps), stage
    assert not any(dep.startswith("models/") for dep in _data_deps("finetune_scratch"))  # no pretrained model


@pytest.mark.parametrize("stage", ["pretrain", "finetune_pretrained", "finetune_scratch"])
def test_the_training_stages_can_be_restored_from_the_run_cache(stage):
    """DVC saves a stage to its run-cache only when no output is a plain `cache: false` one (metrics and plots
    are exempt); one such output made every return to earlier params rerun the fine-tunes (10 min 41 s)."""
    for entry in STAGES[stage]["outs"]:
        if isinstance(entry, dict):
            (path, options), = entry.items()
            assert options.get("cache", True), f"{stage}: {path} is a plain cache: false output"


# --- the layout: a shared core and one package per task ------------------------------------------------------------

TASKS = ("classification", "translation")
FRONT = ("cli", "course")  # the command line and the course's experiment (its French text is translation's
# Bible database): may use either task
SHARED = tuple(sorted(p.parent.name for p in (SRC / "lmtransfer").glob("*/__init__.py")
                      if p.parent.name not in TASKS + FRONT))  # what both tasks build on: never imports a task


def test_the_module_map_names_every_package_and_module():
    page = (REPO / "docs" / "guide" / "development.md").read_text(encoding="utf-8")
    for package in SHARED + TASKS + FRONT:
        assert f"\n  {package}/ " in page, f"docs/guide/development.md's module map lacks src/lmtransfer/{package}/"


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.slow
def test_a_task_package_never_imports_the_other_and_the_shared_code_imports_neither():
    graph = {m: imported_modules(module_file(m), m) for m in _all_modules()}
    for module, imports in sorted(graph.items()):
        home = _package_of(module)
        for target in sorted(imports):
            there = _package_of(target)
            if home in TASKS:
                assert there not in TASKS or there == home, f"{module} (task {home}) imports {target} (task {there})"
            if home in SHARED:
                assert there not in TASKS, f"{module} is shared by both tasks but imports {target} (task {there})"


def test_no_task_module_is_left_at_the_top_of_the_package():
    top = sorted(p.name for p in (SRC / "lmtransfer").glob("*.py"))
    assert top == ["__init__.py"], f"modules at the top of src/lmtransfer/: {top}; each belongs in a package"
    assert not list((SRC / "lmtransfer").rglob("translation_*.py"))


@pytest.mark.parametrize("pipeline_stage", sorted(ALL_STAGES), ids="{0[0]}:{0[1]}".format)
def test_core_holds_only_what_every_stage_runs_so_each_lists_it_as_one_folder(pipeline_stage):
    prefix, definition = ALL_STAGES[pipeline_stage]
    deps = [str(d).removeprefix(prefix) for d in definition["deps"]]
    assert "src/lmtransfer/core" in deps, f"{pipeline_stage} lists core's files one by one: {deps}"


@pytest.mark.parametrize("pipeline_stage", sorted(ALL_STAGES), ids="{0[0]}:{0[1]}".format)
def test_no_stage_depends_on_the_other_task(pipeline_stage):
    prefix, definition = ALL_STAGES[pipeline_stage]
    task = "translation" if pipeline_stage[0].startswith("translation/") else "classification"
    other = next(t for t in TASKS if t != task)
    deps = [str(d).removeprefix(prefix) for d in definition["deps"]]
    assert not [d for d in deps if d.startswith(f"src/lmtransfer/{other}")], f"{pipeline_stage} lists {other} code"
    scripts = [d for d in deps if d.startswith("stages/")]
    assert scripts == [definition["cmd"].split()[1].removeprefix(prefix)], f"{pipeline_stage}: stage scripts {scripts}"


def test_every_module_the_makefile_and_ci_name_exists():
    """`make ui` runs `python -c 'from lmtransfer.<module> import ...'`: a moved module must not break it."""
    import re

    for path in (REPO / "Makefile", *(REPO / ".ci").glob("*")):
        for module in re.findall(r"from (lmtransfer(?:\.\w+)*) import", path.read_text(encoding="utf-8")):
            assert module_file(module), f"{path.name} imports {module}, which does not exist"


def test_the_tests_mirror_the_packages():
    """A newcomer finds the tests of src/lmtransfer/<package>/ in tests/<package>/."""
    packages = {p.parent.name for p in (SRC / "lmtransfer").glob("*/__init__.py")}
    tests = REPO / "tests"
    missing = sorted(p for p in packages if not any((tests / p).glob("test_*.py")))
    assert not missing, f"no tests/<package>/test_*.py for: {missing}"
    assert not [p.name for p in tests.glob("*.py") if p.name not in ("conftest.py", "pipeline_repo.py", "loopback.py")], (
        "tools belong in tools/, tests in tests/<package>/ (beside them only the shared helpers named here)")


FUNCTION_LINES = 65  # about a screen: a function longer than that does more than one thing


def test_no_function_is_longer_than_a_screen():
    import ast

    long = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


@pytest.mark.parametrize("pipeline", [".", "translation", "course"])
def test_every_committed_metrics_file_is_an_output_its_pipeline_declares(pipeline):
    """A file under metrics/ that no stage writes is a stale result (an earlier design's), however plausible it
    looks: each one git tracks must be an output, or inside an output folder, of its pipeline's dvc.lock."""
    import subprocess

    folder = REPO / pipeline
    stages = YAML(typ="safe").load((folder / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    outputs = {out["path"] for stage in stages.values() for out in stage.get("outs", [])}
    tracked = subprocess.run(["git", "ls-files", "metrics"], cwd=folder, capture_output=True, text=True,
                             check=True).stdout.split()
    stale = [path for path in tracked if not path.endswith(".gitignore")
             and not any(path == out or path.startswith(out.rstrip("/") + "/") for out in outputs)]
    assert tracked and stale == []


def test_command_lines_are_parsed_in_plain_sight_not_deep_in_the_library():
    """A stage's arguments are parsed by its script (through `training.stage_args`) and the `lmtransfer`
    command's by cli/; elsewhere `sys.argv` is only passed on unread (torchrun's relaunch)."""
    parsers = sorted(path.relative_to(SRC).as_posix() for path in (SRC / "lmtransfer").rglob("*.py")
                     if re.search(r"\.parse_args\(|parse_known_args\(", path.read_text(encoding="utf-8")))
    allowed = {"lmtransfer/training/stage_args.py", "lmtransfer/training/distributed.py",
               "lmtransfer/reporting/pages.py"}
    assert [p for p in parsers if p not in allowed and not p.startswith("lmtransfer/cli/")] == []
    for script in ("pretrain.py", "finetune.py", "translation/pretrain.py", "translation/finetune.py"):
        assert "ARGS = parse_" in (REPO / "stages" / script).read_text(encoding="utf-8"), script
