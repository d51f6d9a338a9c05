"""The project lock's waiting line names the command that holds the lock, whichever command that is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.core.projectlock import ProjectBusy, holder, project_lock

# A stand-in for a running `ggml-vendor <command>`: it takes the project lock the way the CLI does and holds
# it until stdin closes. Its argv ends with the command name, as a real `ggml-vendor collect ...` has it.
_HOLD = """
import sys
from pathlib import Path
from toolkit.core.projectlock import project_lock
with project_lock(Path(sys.argv[1]), command=sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="the holder is read from /proc/locks (Linux only)")
@pytest.mark.parametrize("command", ["collect", "variants", "publish"])
def test_the_waiting_line_names_the_command_holding_the_lock(tmp_path: Path, command: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path), command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert holder(tmp_path) == f"ggml-vendor {command} (pid {proc.pid})"
        with pytest.raises(ProjectBusy) as exc, project_lock(tmp_path, wait=False):
            pass
        assert f"ggml-vendor {command} (pid {proc.pid}) is using" in exc.value.message
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


# The same holder, told its command through the environment: its argv names no command at all, so only the
# record the lock makes itself can name it (and a name no command list holds is named all the same).
_HOLD_QUIET = """
import os, sys
from pathlib import Path
from toolkit.core.projectlock import project_lock
with project_lock(Path(sys.argv[1]), command=os.environ["HOLDER_COMMAND"]):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.skipif(not Path("/proc/net/unix").exists(), reason="the record is an abstract socket (Linux only)")
@pytest.mark.parametrize("command", ["patch", "a-command-of-a-later-version"])
def test_the_holder_records_its_command_itself(tmp_path: Path, command: str) -> None:
    import os

    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_QUIET, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOLDER_COMMAND": command},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert holder(tmp_path) == f"ggml-vendor {command} (pid {proc.pid})"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
    assert holder(tmp_path) == "another ggml-vendor command"  # released: nothing left behind to go stale
