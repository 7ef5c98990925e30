"""A stage or command ends its process without Python's teardown, and loses nothing on the way out."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import atexit, ctypes, sys, threading, time
    from lmtransfer.harness.process_exit import end_process

    class Torn:  # says so when Python's teardown frees it
        def __del__(self):
            print("torn down", flush=True)

    kept = Torn()
    atexit.register(lambda: print("exit handler ran"))
    print("buffered line")  # no flush: still in Python's buffer of a pipe
    ctypes.CDLL(None).printf(b"C stdio line\\n")  # still in C's stdio buffer of a pipe
    if sys.argv[2] == "thread":
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
    code = sys.argv[1]
    end_process(None if code == "None" else int(code) if code.lstrip("-").isdigit() else code)
""")


def _ends(tmp_path, code: str, thread: str = "") -> subprocess.CompletedProcess:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, str(script), code, thread or "-"], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize(("code", "status"), [("0", 0), ("None", 0), ("3", 3), ("a message", 1)])
def test_the_status_is_sys_exits_and_every_buffer_and_exit_handler_comes_through_without_teardown(tmp_path, code,
                                                                                                 status):
    done = _ends(tmp_path, code)
    assert done.returncode == status
    assert done.stdout.splitlines() == ["buffered line", "C stdio line", "exit handler ran"]  # no "torn down"
    assert done.stderr == ("a message\n" if code == "a message" else "")


def test_a_thread_still_running_is_waited_for_and_the_usual_exit_follows(tmp_path):
    done = _ends(tmp_path, "0", "thread")
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["buffered line", "C stdio line", "thread finished", "exit handler ran",
                                        "torn down"]
