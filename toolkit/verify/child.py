"""Runs a check's script in a fresh Python process and reads back the one JSON line it prints after a marker:
the import smoke test and the conformance gate load a built variant there, so a crash in it (bad ELF, missing
symbol, a kernel fault) cannot take verify down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChildResult:
    """What the child left: its document (None when it died or printed none), exit status and last stderr line."""

    doc: dict[str, Any] | None
    returncode: int
    tail: str
    timed_out: bool = False


def run_child(
    script: str,
    args: list[str],
    *,
    marker: str,
    timeout: float,
    python: str | None = None,
    env: dict[str, str] | None = None,
) -> ChildResult:
    """`python -c script *args`; its document is the JSON after `marker` on the first line starting with it."""
    # never leave __pycache__ inside the variant
    environment = {**(env if env is not None else os.environ), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment,
        )
    except subprocess.TimeoutExpired:
        return ChildResult(None, -1, "", timed_out=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(marker)), None)
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    if proc.returncode != 0 or line is None:
        return ChildResult(None, proc.returncode, tail)
    return ChildResult(json.loads(line[len(marker) :]), proc.returncode, tail)
