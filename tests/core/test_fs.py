"""toolkit.core.fs, the one atomic write / directory swap / leftover cleanup: SIGKILLed at every checkpoint of a
swap (both the renameat2 exchange and the journaled fallback), the target is always the old tree or the new
one, and recovery leaves nothing behind; atomic writes keep permissions and never leave half a file."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.helpers.kill import run_killed_at
from toolkit.core import fs

OLD = {"a.txt": b"old a\n", "sub/b.txt": b"old b\n"}
NEW = {"a.txt": b"new a\n", "sub/c.txt": b"new c\n", "d.txt": b"d\n"}


def tree(path: Path) -> dict[str, bytes] | None:
    if not path.exists():
        return None
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def write_tree(path: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)


def _swap_in_child(parent: Path, kill_at: int) -> int:
    """Stage NEW and swap it over parent/target in a forked child that SIGKILLs itself at checkpoint
    `kill_at`; returns the wait status."""

    def swap() -> None:
        staged = fs.new_staging(parent, ".target.stage-")
        fs.checkpoint("stage created")
        write_tree(staged, NEW)
        fs.checkpoint("staged")
        fs.swap_dir(staged, parent / "target")
        fs.checkpoint("done")

    return run_killed_at(kill_at, swap)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fs.NO_FSYNC_ENV, "1")


@pytest.mark.parametrize("mode", ["exchange", "journaled", "absent"])
def test_swap_dir_sigkilled_at_every_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    if mode == "journaled":
        monkeypatch.setenv(fs.NO_EXCHANGE_ENV, "1")
    killed = 0
    for n in range(1, 50):
        parent = tmp_path / f"p{n}"
        parent.mkdir()
        target = parent / "target"
        if mode != "absent":
            write_tree(target, OLD)
        old = tree(target)
        status = _swap_in_child(parent, n)
        if os.WIFEXITED(status):
            assert os.WEXITSTATUS(status) == 0 and tree(target) == NEW
            break
        assert os.WTERMSIG(status) == signal.SIGKILL
        killed += 1
        if mode == "exchange" or os.path.exists(target):
            assert tree(target) in (old, NEW), f"checkpoint {n}: neither the old nor the new tree"
        fs.recover_swap(target)  # the child is dead, so its journal is undone and its leftovers are stale
        fs.stale_staging(parent, ".target.stage-")
        fs.stale_staging(parent, fs.old_prefix(target))
        assert tree(target) in (old, NEW), f"checkpoint {n}: neither old nor new after recovery"
        assert sorted(p.name for p in parent.iterdir()) == (["target"] if tree(target) else []), f"checkpoint {n}"
    else:
        pytest.fail("the swap never completed")
    assert killed >= (3 if mode != "journaled" else 5), "too few checkpoints exercised"


def test_journaled_swap_is_rolled_back_after_the_first_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed between the fallback's two renames: target is gone until recover_swap puts the old tree back."""
    monkeypatch.setenv(fs.NO_EXCHANGE_ENV, "1")
    write_tree(tmp_path / "target", OLD)
    n = 1
    while True:
        status = _swap_in_child(tmp_path, n)
        if os.WIFEXITED(status) or not (tmp_path / "target").exists():
            break
        n += 1
    assert not (tmp_path / "target").exists(), "no checkpoint between the two renames"
    assert fs.recover_swap(tmp_path / "target") == ["restored target/ from an interrupted swap"]
    assert tree(tmp_path / "target") == OLD and not fs.journal_path(tmp_path / "target").exists()


def test_recover_swap_leaves_a_live_writers_journal(tmp_path: Path) -> None:
    target = tmp_path / "target"
    old = tmp_path / f"{fs.old_prefix(target)}1-ab"
    write_tree(old, OLD)
    fs.journal_path(target).write_text(f'{{"old": "{old.name}", "new": "x", "pid": {os.getpid()}}}')
    assert fs.recover_swap(target) == [] and not target.exists() and old.is_dir()


def test_stale_staging_removes_only_dead_runs(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    mine = fs.new_staging(tmp_path, ".x.stage-")
    (tmp_path / f".x.stage-{dead_pid}-00ff").mkdir()
    (tmp_path / ".x.stage-legacy").mkdir()
    (tmp_path / f".x.stage-{dead_pid}-0aa").write_text("a temp file")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (tmp_path / f".x.stage-{dead_pid}-0bb").symlink_to(outside)
    (tmp_path / "other").mkdir()
    removed = fs.stale_staging(tmp_path, ".x.stage-")
    assert removed == sorted(
        [f".x.stage-{dead_pid}-00ff", ".x.stage-legacy", f".x.stage-{dead_pid}-0aa", f".x.stage-{dead_pid}-0bb"]
    )
    assert mine.is_dir() and (outside / "keep").read_text() == "keep" and (tmp_path / "other").is_dir()
    assert fs.stale_staging(tmp_path, ".x.stage-", only_dead=False) == [mine.name] and not mine.exists()


def test_atomic_write_keeps_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "file.txt"
    fs.atomic_write(path, b"one")
    assert path.read_bytes() == b"one"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask(), "a new file gets the umask's mode, not 0600"
    path.chmod(0o751)
    fs.atomic_write(path, b"two")
    assert path.read_bytes() == b"two" and stat.S_IMODE(path.stat().st_mode) == 0o751
    assert sorted(p.name for p in path.parent.iterdir()) == ["file.txt"]


def test_atomic_write_killed_mid_write_keeps_the_old_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    pid = os.fork()
    if pid == 0:
        # die inside the write: after the temp file exists, before the rename
        real = fs.write_new

        def dying(path: Path, data: bytes) -> None:
            real(path, data[:3])
            os.kill(os.getpid(), signal.SIGKILL)

        fs.write_new = dying
        fs.atomic_write(path, b"new bytes" * 1000)
        os._exit(0)
    os.waitpid(pid, 0)
    assert path.read_bytes() == b"old"
    assert fs.stale_staging(tmp_path, ".f.bin.tmp-") != [] and sorted(os.listdir(tmp_path)) == ["f.bin"]


def test_atomic_write_failure_removes_its_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"old")

    def boom(src: object, dst: object) -> NoReturn:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk on fire"):
        fs.atomic_write(path, b"new")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _staged_in_child(target: Path, kill_at: int, **kw: Any) -> int:
    """fs.staged(target) filled with NEW in a forked child that SIGKILLs itself at checkpoint `kill_at`."""

    def fill() -> None:
        with fs.staged(target, **kw) as stage:
            write_tree(stage, NEW)

    return run_killed_at(kill_at, fill)


@pytest.mark.parametrize("mode", ["exchange", "journaled", "absent"])
def test_staged_sigkilled_at_every_checkpoint_is_recovered_by_the_next_staged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The build's and provisioning's swap: killed anywhere, target is old or new; the next `staged` (or
    `recover`) for the target leaves only the target."""
    if mode == "journaled":
        monkeypatch.setenv(fs.NO_EXCHANGE_ENV, "1")
    killed = 0
    for n in range(1, 50):
        target = tmp_path / f"p{n}" / "target"
        target.parent.mkdir()
        if mode != "absent":
            write_tree(target, OLD)
        old = tree(target)
        status = _staged_in_child(target, n)
        if os.WIFEXITED(status):
            assert os.WEXITSTATUS(status) == 0 and tree(target) == NEW
            assert os.listdir(target.parent) == ["target"]
            break
        killed += 1
        if mode == "exchange" or target.exists():
            assert tree(target) in (old, NEW), f"checkpoint {n}"
        if n % 2:
            fs.recover(target, ".target.tmp-")
            assert tree(target) in (old, NEW) and os.listdir(target.parent) == (["target"] if tree(target) else [])
        else:
            with fs.staged(target) as stage:  # the next run's own swap
                write_tree(stage, NEW)
            assert tree(target) == NEW and os.listdir(target.parent) == ["target"], f"checkpoint {n}"
    else:
        pytest.fail("the staged swap never completed")
    assert killed >= (4 if mode == "journaled" else 2)


def test_staged_leaves_target_alone_on_error_and_keep_existing_keeps_theirs(tmp_path: Path) -> None:
    target = tmp_path / "t"
    write_tree(target, OLD)
    with pytest.raises(RuntimeError), fs.staged(target) as stage:
        write_tree(stage, NEW)
        raise RuntimeError("half way")
    assert tree(target) == OLD and os.listdir(tmp_path) == ["t"]
    with fs.staged(target, keep_existing=True) as stage:
        write_tree(stage, NEW)  # another process made `t` meanwhile: theirs is kept
    assert tree(target) == OLD and os.listdir(tmp_path) == ["t"]


def test_scratch_is_removed_after_the_block_and_dead_runs_scratch_before_it(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / f"obj.{int(dead.stdout)}-00ff").mkdir()
    with fs.scratch(tmp_path, "obj.") as path:
        assert path.is_dir() and path.name.startswith(f"obj.{os.getpid()}-")
        assert os.listdir(tmp_path) == [path.name]
    assert os.listdir(tmp_path) == []


def test_recover_dir_rolls_back_an_interrupted_swap_and_removes_dead_staging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's start-up cleanup of build/: found by the journal's name, whatever the variant."""
    monkeypatch.setenv(fs.NO_EXCHANGE_ENV, "1")
    write_tree(tmp_path / "target", OLD)
    n = 1
    while not os.WIFEXITED(_swap_in_child(tmp_path, n)) and (tmp_path / "target").exists():
        n += 1
    assert not (tmp_path / "target").exists(), "no checkpoint between the two renames"
    (tmp_path / ".c.tmp-1-ab").mkdir()  # a dead run's staging dir
    actions = fs.recover_dir(tmp_path, (".tmp-",), only_dead=False)
    assert "restored target/ from an interrupted swap" in actions and "removed leftover .c.tmp-1-ab" in actions
    assert tree(tmp_path / "target") == OLD
    fs.stale_staging(tmp_path, ".target.stage-")  # the killed child's own staging prefix (this test's)
    assert os.listdir(tmp_path) == ["target"]
