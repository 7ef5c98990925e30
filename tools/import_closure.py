"""Which project modules each stage script can run: the import closure DVC must see as deps.

DVC reruns a stage only when a declared dependency changes, so every module a
stage imports (directly, through another module, or inside a function) must be
one of its `deps` in dvc.yaml. The modules that cannot change a stage's outputs
(MLflow logging, error wrapping, progress bars) live in `lmtransfer.harness`, which
is exempt and not followed. Where a stage runs every module of a folder, its deps
name the folder instead of the files (the list stays short, and stays exact).

    python tools/import_closure.py          # each stage's closure, as dvc.yaml deps
    python tools/import_closure.py --write  # rewrite the src/ deps of every stage of both dvc.yaml files to match
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PACKAGE = "lmtransfer"
# Cannot change what a stage writes: it logs, prints or wraps errors. Not followed, and not to be declared
# (declaring it would rerun stages for nothing).
EXEMPT = "lmtransfer.harness"


def is_exempt(module: str) -> bool:
    return module == EXEMPT or module.startswith(EXEMPT + ".")


def module_file(module: str) -> Path | None:
    """src/lmtransfer/a/b.py or src/lmtransfer/a/b/__init__.py for `lmtransfer.a.b`; None if neither."""
    base = SRC.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imported_modules(path: Path, module: str | None) -> set[str]:
    """Project modules `path` imports anywhere (module level or inside functions), as dotted names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = (module if path.name == "__init__.py" else module.rpartition(".")[0]) if module else ""
    found: set[str] = set()
    for node in ast.walk(tree):
        if _under_type_checking(node, parents):
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from .data import prepare` imports the submodule; `from .io import read_json` the module.
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names if name.split(".")[0] == PACKAGE and module_file(name))
    return found


def with_parents(module: str) -> set[str]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py first."""
    parts = module.split(".")
    return {".".join(parts[: i + 1]) for i in range(len(parts))}


def closure(script: Path) -> set[str]:
    """Every non-exempt project module importing `script` can execute."""
    seen: set[str] = set()
    pending = [m for name in imported_modules(script, None) for m in with_parents(name)]
    while pending:
        module = pending.pop()
        if module in seen or is_exempt(module):
            continue
        seen.add(module)
        pending += [m for name in imported_modules(module_file(module), module) for m in with_parents(name)]
    return seen


def closure_files(script: Path) -> set[str]:
    """The closure as repository-relative paths, the way dvc.yaml lists deps."""
    return {module_file(m).relative_to(REPO).as_posix() for m in closure(script)}


def folder_files(folder: Path) -> set[str]:
    """Every module a folder dep stands for (DVC hashes the folder; .dvcignore leaves out __pycache__)."""
    return {p.relative_to(REPO).as_posix() for p in folder.rglob("*.py")}


def collapsed(files: set[str]) -> list[str]:
    """`files` with each package folder they cover whole named once instead, outermost first; the package
    root itself is never collapsed (a stage never runs both tasks)."""
    deps: list[str] = []
    remaining = set(files)
    folders = sorted({p for f in files for p in Path(f).parents if SRC / PACKAGE in (REPO / p).parents},
                     key=lambda p: len(p.parts))
    for folder in folders:
        covered = folder_files(REPO / folder)
        if covered and covered <= remaining:
            deps.append(folder.as_posix())
            remaining -= covered
    return sorted(deps + sorted(remaining))


PIPELINES = (REPO / "dvc.yaml", REPO / "translation" / "dvc.yaml")  # each task's pipeline
# course/, reviews/ and imdb/dvc.yaml are dvc.yaml's stages run in those folders (tools/folder_pipelines.py): checked
# with it, written from it


def dep_prefix(pipeline: Path) -> str:
    """How a pipeline's deps reach the repository root: '' at the root, '../' from translation/."""
    depth = len(pipeline.parent.relative_to(REPO).parts)
    return "../" * depth


def write_dvc_yaml(path: Path = REPO / "dvc.yaml") -> None:
    """Replace each stage's src/ deps with its closure, in place (comments and order kept); the src/ deps go
    after the stage script's."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes, yaml.width = True, 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    document = yaml.load(path)
    prefix = dep_prefix(path)
    for stage in document["stages"].values():
        deps = stage.get("deps", [])
        script = next(d for d in deps if str(d).startswith(f"{prefix}stages/"))
        kept = [d for d in deps if not str(d).startswith(f"{prefix}src/")]
        first = max(i for i, d in enumerate(kept) if str(d).startswith(f"{prefix}stages/")) + 1
        closure = [prefix + f for f in collapsed(closure_files(REPO / script.removeprefix(prefix)))]
        deps[:] = kept[:first] + closure + kept[first:]
    yaml.dump(document, path)


def main() -> None:
    if "--write" in sys.argv[1:]:
        for pipeline in PIPELINES:
            write_dvc_yaml(pipeline)
        from folder_pipelines import main as write_folder_pipelines

        write_folder_pipelines()  # their stages are dvc.yaml's
        return
    for script in sorted((REPO / "stages").rglob("*.py")):
        print(f"{script.relative_to(REPO)}:")
        for path in collapsed(closure_files(script)):
            print(f"  - {path}")


if __name__ == "__main__":
    sys.exit(main())
