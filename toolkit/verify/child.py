"""A check's script run in a fresh Python process, so a crash while loading a variant (bad ELF, missing symbol,
an abort in a static initializer) fails that check instead of taking verify down."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChildRun:
    """What the child answered: the JSON it printed after its marker, or why there is none."""

    hung: bool = False  # killed after the timeout
    returncode: int = 0
    tail: str = ""  # the last line of its stderr ("(no output)"), when it died or printed no answer
    doc: Any = None  # the answer; None when it hung or died

    @property
    def died(self) -> bool:
        """It ended without an answer: a non-zero exit, or no marked line on stdout."""
        return not self.hung and self.doc is None


def run_child(
    script: str, args: Sequence[str], marker: str, *, timeout: int, env: Mapping[str, str], python: str | None = None
) -> ChildRun:
    """Run `script` with `args` under `python` (this interpreter by default); the answer is the first stdout line
    starting with `marker`, the JSON after it, and counts only when the child also exited 0."""
    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env),
        )
    except subprocess.TimeoutExpired:
        return ChildRun(hung=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(marker)), None)
    if proc.returncode != 0 or line is None:
        return ChildRun(returncode=proc.returncode, tail=(proc.stderr.strip().splitlines() or ["(no output)"])[-1])
    return ChildRun(doc=json.loads(line[len(marker) :]))
