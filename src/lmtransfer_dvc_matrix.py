"""DVC's message for a stage grid over a value that is not a list: it names the params file, the line and the key.

dvc.yaml lays out one stage per seed with `matrix: {seed: ${pretrain.seeds}}`. DVC reads that grid before any
code of ours runs, and a number or a word there ends in "unexpected error - 'Value' object is not iterable",
naming neither params.yaml nor the key. No DVC option or plugin reaches that point, so `make venv` writes a
one-line `lmtransfer_dvc_matrix.pth` into the environment's site-packages that imports this module when Python
starts. It costs one finder in `sys.meta_path`: when `dvc.parsing` is imported, the property that lays out
the grid is wrapped to check that every axis is a list first, and to raise DVC's own `ResolveError` if not
(DVC prints it as one line). Nothing else of DVC changes; if DVC's internals move, the wrapper steps aside
and DVC's own message stays. Importing `lmtransfer` is out of the question here (it pins kernels, see its
`__init__`), so this module is on its own.
"""

import importlib.machinery  # loaded by Python's start already: this module adds nothing else to it
import sys

PARSING = "dvc.parsing"


class _WrapAfterImport:
    """A meta-path finder that lets the normal finder load `dvc.parsing`, then wraps the grid's layout."""

    def find_spec(self, name, path=None, target=None):
        if name != PARSING:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module):
            run_module(module)
            wrap_matrix_layout(module)

        loader.exec_module = exec_module
        return spec


def wrap_matrix_layout(parsing) -> bool:
    """Make `MatrixDefinition.normalized_iterable` refuse an axis that is not a list; False when DVC moved it."""
    matrix = getattr(parsing, "MatrixDefinition", None)
    layout = getattr(matrix, "__dict__", {}).get("normalized_iterable")
    lay_out = getattr(layout, "func", None) or getattr(layout, "fget", None)  # functools' or funcy's cached_property
    resolve_error = getattr(parsing, "ResolveError", None)
    if not callable(lay_out) or resolve_error is None:
        return False
    if getattr(lay_out, "checks_lists", False):
        return True

    def normalized_iterable(definition):
        problem = missing_params_file(definition) or not_a_list(definition)
        if problem:
            raise resolve_error(problem)
        return lay_out(definition)

    normalized_iterable.checks_lists = True
    try:
        wrapped = type(layout)(normalized_iterable)
    except TypeError:
        return False
    if hasattr(wrapped, "__set_name__"):
        wrapped.__set_name__(matrix, "normalized_iterable")
    matrix.normalized_iterable = wrapped
    return True


def not_a_list(definition) -> str | None:
    """The message for the first axis of a stage's grid that is not a list, or None when all are."""
    import os

    try:
        axes = definition.resolved_iterable
        written = definition.matrix_data
        where, name, dvc_yaml = definition.where, definition.name, definition.relpath
    except AttributeError:
        return None
    for axis, value in axes.items():
        if _is_list(value):
            continue
        given = getattr(value, "value", value)
        stage = f"failed to parse '{where}.{name}.matrix' in '{dvc_yaml}'"
        key = _referenced_key(written.get(axis) if isinstance(written, dict) else None)
        if key is None:
            return f"{stage}: '{axis}' must be a list (one stage per item), not {given!r}"
        params = os.path.join(os.path.dirname(dvc_yaml), "params.yaml")
        line = key_line(params, key)
        at = f"{params}, line {line}" if line else params
        return (f"{stage}: {at}: {key} must be a list (one stage per item), e.g. [0, 1, 2], not {given!r}; "
                f"`lmtransfer params --check {params}` checks every key")
    return None


def missing_params_file(definition) -> str | None:
    """The message for a grid that reads a key of a params.yaml that is not there (DVC says only "Could not find
    'pretrain.seeds'"), or None."""
    import os

    try:
        written, where, name, dvc_yaml = definition.matrix_data, definition.where, definition.name, definition.relpath
    except AttributeError:
        return None
    keys = [_referenced_key(value) for value in written.values()] if isinstance(written, dict) else []
    params = os.path.join(os.path.dirname(dvc_yaml), "params.yaml")
    key = next((key for key in keys if key), None)
    if key is None or os.path.exists(params):
        return None
    return (f"failed to parse '{where}.{name}.matrix' in '{dvc_yaml}': {params} is missing, and the pipeline reads "
            f"its parameters there ({key} among them); restore it (git checkout -- {params}) or write one")


def _referenced_key(written) -> str | None:
    """`pretrain.seeds` for an axis written `${pretrain.seeds}`, read by DVC's own interpolation parser; None for
    anything else (a list written in dvc.yaml, text around the reference)."""
    from dvc.parsing.interpolate import get_expression, get_matches, is_exact_string

    if not isinstance(written, str):
        return None
    matches = get_matches(written)
    if len(matches) != 1 or not is_exact_string(written, matches):
        return None
    return get_expression(matches[0], skip_checks=True).strip()


def _is_list(value) -> bool:
    """A sequence of items, as DVC's grid needs: not a number, a word, nothing, nor a mapping (its keys)."""
    from collections.abc import Mapping

    if isinstance(value, (str, bytes, Mapping)):
        return False
    try:
        iter(value)
    except TypeError:
        return False
    return True


def key_line(params_file: str, key: str) -> int | None:
    """The 1-based line of a dotted key in a YAML file, or None when the file or the key is not there."""
    try:
        import yaml

        with open(params_file, encoding="utf-8") as handle:
            node = yaml.compose(handle)
    except Exception:  # a file DVC could read but this cannot: the message goes without a line
        return None
    for part in key.split("."):
        if not isinstance(node, yaml.MappingNode):
            return None
        node = next((value for name, value in node.value if name.value == part), None)
        if node is None:
            return None
    return node.start_mark.line + 1


def install() -> None:
    """Wrap `dvc.parsing` now if it is loaded, else when it is; once per process."""
    if PARSING in sys.modules:
        wrap_matrix_layout(sys.modules[PARSING])
    elif not any(isinstance(finder, _WrapAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapAfterImport())


install()
