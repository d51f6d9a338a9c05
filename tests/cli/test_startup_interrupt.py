"""Ctrl-C while the command is still starting (importing its modules, before any command runs) gives one
line and exit 130, not an import's traceback (issue 33 item 4). The child reports its imports as they
finish (python -X importtime); the signal is sent once typer, imported by the command's module inside the
entry point, is in, so it always lands in the start-up window."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", ["typer", "rich.console"])
def test_ctrl_c_while_importing_is_one_line_and_130(tmp_path: Path, module: str) -> None:
    code = "import sys; from toolkit.cli import main; sys.argv[1:] = ['status', '-C', sys.argv[1]]; main()"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-c", code, str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stderr is not None
    done = re.compile(rf"^import time:.*\|\s+{re.escape(module)}$")
    head = []
    for raw in proc.stderr:  # one line per finished import, as it finishes
        head.append(raw.decode())
        if done.match(head[-1].rstrip()):
            proc.send_signal(signal.SIGINT)
            break
    err = "".join(head) + proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert any(done.match(ln) for ln in err.splitlines()), f"the child never imported {module}: {err[-2000:]}"
    ours = [ln for ln in err.splitlines() if not ln.startswith("import time:")]
    assert proc.returncode == 130, err[-3000:]
    assert ours == ["interrupted: nothing was done (Ctrl-C while ggml-vendor was starting) — run the command again"]


# The child: a Ctrl-C that lands the moment toolkit.cli starts its own imports (before main() runs), sent by
# an import hook of the test's (the first import toolkit/cli.py makes of ours is toolkit.commands), in the two
# ways the command starts: the console script (which imports toolkit.cli, then calls main) and `python -m`.
_CHILD = """
import os, runpy, signal, sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "toolkit.commands":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

how, project = sys.argv[1], sys.argv[2]
sys.meta_path.insert(0, CtrlC())
if how == "script":  # what the installed ggml-vendor script does
    sys.argv[:] = [os.path.join(os.path.dirname(sys.executable), "ggml-vendor"), "status", "-C", project]
    from toolkit.cli import main
    sys.exit(main())
sys.argv[:] = ["-m", "status", "-C", project]
runpy.run_module("toolkit.cli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("how", ["script", "python -m"])
def test_ctrl_c_while_the_entry_module_itself_imports_is_one_line_and_130(tmp_path: Path, how: str) -> None:
    """Issue 33 item 4: the window before main() (the entry module's own imports) is caught as well."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    how = how.split()[-1]
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, how, str(tmp_path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [
        "interrupted: nothing was done (Ctrl-C while ggml-vendor was starting) — run the command again"
    ]
    assert proc.stdout == ""
