"""The code's shape: one package per task over a shared core, each stage depends on the package folders it
imports, and no module imports in a circle."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
PIPELINES = ("dvc.yaml", "translation/dvc.yaml")
EXEMPT = "harness"  # logs, prints and wraps errors: cannot change what a stage writes, so no stage depends on it
STAGES = YAML(typ="safe").load((REPO / "dvc.yaml").read_text())["stages"]
# every pipeline's stages, as (pipeline, stage): deps written relative to the pipeline's folder
ALL_STAGES = {(pipeline, name): ("../" * pipeline.count("/"), stage) for pipeline in PIPELINES
              for name, stage in YAML(typ="safe").load((REPO / pipeline).read_text())["stages"].items()}


def module_file(module: str) -> Path | None:
    """src/lmtransfer/a/b.py or src/lmtransfer/a/b/__init__.py for `lmtransfer.a.b`; None if neither."""
    base = SRC.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


@functools.cache  # the walks below read each module many times
def imported_modules(path: Path, module: str | None) -> frozenset[str]:
    """Project modules `path` imports anywhere (module level or inside functions), as dotted names."""
    package = (module if path.name == "__init__.py" else module.rpartition(".")[0]) if module else ""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]  # `from .data import prepare`
        else:
            continue
        found.update(name for name in names if name.split(".")[0] == "lmtransfer" and module_file(name))
    return frozenset(found)


def imported_packages(script: Path) -> set[str]:
    """The folders of src/lmtransfer/ whose code `script` can run (importing a.b.c runs a/__init__.py first),
    following imports through the project's modules; the package root as its __init__.py."""
    seen: set[str] = set()
    pending = sorted(imported_modules(script, None))
    while pending:
        module = pending.pop()
        if module in seen or module.split(".")[1:2] == [EXEMPT]:
            continue
        seen.add(module)
        pending += [".".join(module.split(".")[:2]), "lmtransfer"] + sorted(imported_modules(module_file(module), module))
    return {"src/lmtransfer/__init__.py" if m == "lmtransfer" else f"src/lmtransfer/{m.split('.')[1]}" for m in seen}


@pytest.mark.parametrize("pipeline_stage", sorted(ALL_STAGES), ids="{0[0]}:{0[1]}".format)
def test_a_stage_depends_on_its_script_and_every_package_folder_it_imports(pipeline_stage):
    """A stage reruns when code it runs changes: an import added later must come with its folder in the deps."""
    stage = pipeline_stage[1]
    prefix, definition = ALL_STAGES[pipeline_stage]
    script = definition["cmd"].split()[1]
    deps = [str(d).removeprefix(prefix) for d in definition["deps"]]
    assert script.removeprefix(prefix) in deps, f"{stage}: its own script {script} is not a dep"
    needed, declared = imported_packages(REPO / script.removeprefix(prefix)), {d for d in deps if d.startswith("src/")}
    assert not needed - declared, f"{stage} imports these packages but does not depend on them: {sorted(needed - declared)}"
    assert not declared - needed, f"{stage} depends on packages it never imports: {sorted(declared - needed)}"


def test_the_import_walk_follows_function_level_and_relative_imports(tmp_path):
    """The check itself: a module imported inside a function, and `from . import x`, count; the harness does not."""
    script = tmp_path / "stage.py"
    script.write_text("def main():\n    from lmtransfer.cli.main import main as cli\n")
    found = imported_packages(script)
    assert {"src/lmtransfer/cli", "src/lmtransfer/core", "src/lmtransfer/pretraining"} <= found  # cmd_generate's
    assert "src/lmtransfer/__init__.py" in found and f"src/lmtransfer/{EXEMPT}" not in found


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
    assert not [p.name for p in tests.glob("*.py") if p.name not in ("conftest.py", "pipeline_repo.py", "loopback.py", "shipped.py")], (
        "tests belong in tests/<package>/ (beside them only the shared helpers named here)")


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


@pytest.mark.parametrize("pipeline", [".", "translation"])
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
