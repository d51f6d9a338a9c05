"""A check script run in a child Python on a built package, its findings read back from its `RESULT {json}` line."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def run_result_script(script: str, *args: str, timeout: float) -> dict[str, Any]:
    """Run `script` (`python -c`) with `args`; asserts it exits 0 and returns the JSON of its RESULT line."""
    res = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout + res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result
