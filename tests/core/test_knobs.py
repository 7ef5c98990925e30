"""The LMTRANSFER_* variables: read in one module, a bad value refused in one line by every entry point, not import."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lmtransfer.core import knobs
from lmtransfer.core.errors import ConfigError

SRC = Path(__file__).resolve().parents[2] / "src" / "lmtransfer"
BAD = [(knobs.JOBS, "0"), (knobs.JOBS, "-1"), (knobs.JOBS, "abc"), (knobs.CPU_KERNELS, "bogus"), (knobs.DEBUG, "maybe")]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_a_value_a_variable_does_not_take_is_refused_naming_what_it_takes_and_is_unset_at_import(monkeypatch, name,
                                                                                                   value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as error:
        knobs.check()
    assert str(error.value).startswith(f"{name}={value!r}: expected {knobs.KNOBS[name].takes}")
    assert "\n" not in str(error.value) and knobs.read_at_import(name) is None
    with pytest.raises(ConfigError):
        knobs.read(name)


@pytest.mark.parametrize(("name", "value"), [(knobs.JOBS, "2"), (knobs.CPU_KERNELS, "NATIVE"),
                                             (knobs.DEBUG, "true"), (knobs.DEBUG, ""), (knobs.EXPERIMENT, "mine")])
def test_values_a_variable_takes_pass_the_check_and_read_parsed(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    knobs.check()
    expected = {"2": 2, "NATIVE": "native", "true": True, "": None, "mine": "mine"}[value]
    assert knobs.read(name) == expected


def test_two_bad_variables_are_both_named(monkeypatch):
    monkeypatch.setenv(knobs.JOBS, "x")
    monkeypatch.setenv(knobs.DEBUG, "y")
    with pytest.raises(ConfigError, match=r"LMTRANSFER_JOBS='x'.*; LMTRANSFER_DEBUG='y'"):
        knobs.check()


@pytest.mark.slow
def test_importing_the_package_never_raises_and_the_command_refuses_in_one_line():
    env = {name: value for name, value in os.environ.items() if not name.startswith("LMTRANSFER_")}
    env.update(LMTRANSFER_JOBS="abc", LMTRANSFER_CPU_KERNELS="bogus")
    imported = subprocess.run([sys.executable, "-c", "import lmtransfer"], env=env, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    command = subprocess.run([sys.executable, "-m", "lmtransfer.cli", "params"], env=env, capture_output=True,
                             text=True)
    assert command.returncode == 1 and "\n" not in command.stderr.strip()  # one line, no traceback
    assert "LMTRANSFER_JOBS='abc'" in command.stderr and "LMTRANSFER_CPU_KERNELS='bogus'" in command.stderr


def test_no_module_but_knobs_reads_an_lmtransfer_variable():
    """Each variable is read through `knobs`: a literal LMTRANSFER_ name in code elsewhere is a second reader."""
    literal = re.compile(r"""["']LMTRANSFER_[A-Z_]+["']""")
    readers = [path.relative_to(SRC).as_posix() for path in SRC.rglob("*.py")
               if path.name != "knobs.py" and literal.search(path.read_text(encoding="utf-8"))]
    assert readers == []


def test_the_docs_table_lists_every_variable_once():
    assert [name for name in knobs.KNOBS if knobs.markdown_table().count(f"`{name}`") != 1] == []
