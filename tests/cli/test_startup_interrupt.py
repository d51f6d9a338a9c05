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
def test_ctrl_c_while_importing_is_one_line_and_130(tmp_path, module) -> None:
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
