"""The kill test: SIGKILL sync at every checkpoint of the vendor/ replacement (and at random times) and check
that vendor/ is always exactly the old tree or the new one, and that the next run cleans up."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fixture_repos import FixtureRepo, build_upstream, make_patch, make_project, sync_project
from tests.helpers.kill import run_killed_at
from toolkit.core import config
from toolkit.core.config import Config
from toolkit.sync.project_plan import SyncRequest
from toolkit.sync.vendor_tree import KILL_ENV, recover

REPO = Path(__file__).resolve().parents[2]


def contents(vendor: Path) -> dict[str, bytes] | None:
    if not vendor.exists():
        return None
    return {p.relative_to(vendor).as_posix(): p.read_bytes() for p in sorted(vendor.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FixtureRepo, dict[str, dict[str, bytes] | None]]]:
    """An upstream, plus the expected vendor/ contents at v1 and at v2 (from reference syncs)."""
    base = tmp_path_factory.mktemp("kill")
    mp = pytest.MonkeyPatch()
    mp.setenv("GGML_VENDOR_CACHE", str(base / "cache"))
    up = build_upstream(base / "up")
    states: dict[str, dict[str, bytes] | None] = {}
    for rev in ("v1", "v2"):
        cfg = config.load(make_project(base / f"ref-{rev}", str(up.path)))
        _write_patch(cfg)
        sync_project(cfg, SyncRequest(rev=rev))
        states[rev] = contents(cfg.vendor_dir)
    assert states["v1"] != states["v2"]
    yield up, states
    mp.undo()


def _write_patch(cfg: Config) -> None:
    # a patch and a non-patch file ride along in vendor/patches: both must survive every swap
    text = "#pragma once\n#define QK8_0 32\n"
    (cfg.vendor_dir / "patches" / "0001-common.patch").write_text(
        make_patch("src/ggml-common.h", text, text + "#define OURS 1\n")
    )
    (cfg.vendor_dir / "patches" / "series.txt").write_text("0001-common.patch\n")


def _fork_sync(cfg: Config, rev: str, kill_at: int) -> int:
    """Run sync in a forked child that SIGKILLs itself at checkpoint `kill_at`; returns the wait status."""
    # replace_vendor starts the count at 1 itself
    return run_killed_at(kill_at, lambda: sync_project(cfg, SyncRequest(rev=rev)), reset=False)


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    # fsync only matters for power loss, not for a killed process; skipping it keeps ~100 syncs fast
    monkeypatch.setenv("GGML_VENDOR_NO_FSYNC", "1")


@pytest.mark.parametrize("start,mode", [("v1", "exchange"), ("v1", "journaled"), ("empty", "exchange")])
def test_sigkill_at_every_checkpoint(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    world: tuple[FixtureRepo, dict[str, dict[str, bytes] | None]],
    mode: str,
    start: str,
) -> None:
    up, states = world
    if mode == "journaled":
        monkeypatch.setenv("GGML_VENDOR_NO_EXCHANGE", "1")
    template = make_project(tmp_path / "template", str(up.path))
    tcfg = config.load(template)
    _write_patch(tcfg)
    if start == "v1":
        sync_project(tcfg, SyncRequest(rev="v1"))
    old, new = contents(tcfg.vendor_dir), states["v2"]
    killed_at = 0
    for n in range(1, 200):
        root = tmp_path / f"p{n}"
        shutil.copytree(template, root, symlinks=True)
        cfg = config.load(root)
        status = _fork_sync(cfg, "v2", n)
        seen = contents(cfg.vendor_dir)
        if os.WIFEXITED(status):
            assert os.WEXITSTATUS(status) == 0 and seen == new
            break  # n is past the last checkpoint: every point has been covered
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        killed_at += 1
        if mode == "exchange" or seen is not None:
            # with RENAME_EXCHANGE there is no instant without a complete vendor/
            assert seen in (old, new), f"checkpoint {n}: vendor/ is neither the old nor the new tree"
        # the next run (any command) completes or rolls back an interrupted swap and removes leftovers
        recover(cfg.root)
        assert contents(cfg.vendor_dir) in (old, new), f"checkpoint {n}: not old/new after recovery"
        assert not list(cfg.root.glob(".vendor.*")), f"checkpoint {n}: leftovers after recovery"
        if n % 4 == 1:  # and a later sync succeeds from whatever was left
            sync_project(cfg, SyncRequest(rev="v2"))
            assert contents(cfg.vendor_dir) == new
        shutil.rmtree(root)
    else:
        pytest.fail("sync never completed")
    assert killed_at >= 10, "too few checkpoints were exercised"


def test_sigkill_cli_subprocess(tmp_path: Path, world: tuple[FixtureRepo, dict[str, dict[str, bytes] | None]]) -> None:
    """The real command in a real subprocess: killed via the checkpoint hook and at random moments."""
    up, states = world
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(1234)
    runs = [("hook", 2), ("hook", 15)] + [("timer", rng.uniform(0.3, 1.5)) for _ in range(2)]
    for i, (how, arg) in enumerate(runs):
        cfg = config.load(make_project(tmp_path / f"p{i}", str(up.path)))
        _write_patch(cfg)
        sync_project(cfg, SyncRequest(rev="v1"))
        cmd = [sys.executable, "-m", "toolkit.cli", "sync", "--rev", "v2", "-C", str(cfg.root)]
        run_env = {**env, KILL_ENV: str(arg)} if how == "hook" else env
        proc = subprocess.Popen(cmd, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if how == "timer":
            time.sleep(arg)
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        if how == "hook":
            assert proc.returncode == -signal.SIGKILL, f"{how} {arg}: the hook did not fire"
        assert contents(cfg.vendor_dir) in (states["v1"], states["v2"]), f"{how} {arg}"
        sync_project(cfg, SyncRequest(rev="v2"))
        assert contents(cfg.vendor_dir) == states["v2"] and not list(cfg.root.glob(".vendor.*"))
