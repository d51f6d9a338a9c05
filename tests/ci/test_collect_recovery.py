"""Recovering collect's journaled swap (the fallback where two directories cannot be exchanged): every command
rolls back a swap a killed run stopped between its two renames before it reads build/. Read-only commands
share the project lock, so two of them may recover the same journal at the same moment (issue 33)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from toolkit.core import fs

VARIANT = "torch214-cxx11-cu130-x86_64-linux"


def _dead_pid() -> int:
    """The pid of a process that has exited (the journal's writer, killed mid-swap)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _killed_swap(build: Path) -> Path:
    """build/ as a SIGKILL between the fallback swap's two renames leaves it: the variant moved aside under
    its old-tree name, the journal naming it, the variant's own directory missing."""
    target = build / VARIANT
    pid = _dead_pid()
    old = build / f"{fs.old_prefix(target)}{pid}-0123abcd"
    old.mkdir(parents=True)
    (old / "metadata.json").write_text('{"id": "old"}\n')
    fs.journal_path(target).write_text(json.dumps({"old": old.name, "new": f".collect-{pid}-x", "pid": pid}))
    return old


def test_two_recoveries_of_one_journal_at_once_leave_the_variant_and_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = tmp_path / "build"
    old = _killed_swap(build)
    # Both recoveries reach the rename that puts the old tree back before either does it: the interleaving two
    # read-only commands starting together can take, made certain here.
    both_there = threading.Barrier(2)
    real_rename = os.rename

    def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(src) == old:
            with contextlib.suppress(threading.BrokenBarrierError):
                both_there.wait(timeout=5)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    done: list[list[str]] = []
    errors: list[BaseException] = []

    def recover() -> None:
        try:
            done.append(fs.recover_swaps(build))
        except BaseException as exc:  # noqa: BLE001 - what a command would have died of
            errors.append(exc)

    threads = [threading.Thread(target=recover) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert sorted(len(actions) for actions in done) == [0, 1]  # exactly one of them put it back
    assert sorted(p.name for p in build.iterdir()) == [VARIANT]  # the one variant, no journal, no old tree
    assert (build / VARIANT / "metadata.json").read_text() == '{"id": "old"}\n'


def test_a_recovery_that_finds_the_variant_already_back_does_nothing(tmp_path: Path) -> None:
    build = tmp_path / "build"
    old = _killed_swap(build)
    assert fs.recover_swaps(build) == [f"restored {VARIANT}/ from an interrupted swap"]
    assert not old.exists()
    assert fs.recover_swaps(build) == []
    assert sorted(p.name for p in build.iterdir()) == [VARIANT]
