"""Issue 11: defects D1-D5 reproduced from outside (the CLI in a subprocess), the project lock between two
processes, and the smaller fidelity bugs (canonical upstream in the lock, llama.cpp provenance in rendered
sources, drift's commit list across a change of object source)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

import pytest

from tests.helpers.fixture_repos import (
    RENDER_PYPROJECT,
    FixtureRepo,
    build_upstream,
    git,
    locked,
    make_project,
    sync_project,
)
from toolkit.core import config
from toolkit.core.config import Config
from toolkit.core.lock import LOCK_NAME
from toolkit.core.projectlock import project_lock
from toolkit.render import stage as render
from toolkit.sync.project_plan import SyncRequest
from toolkit.sync.vendor_tree import INT_ENV

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_VENDOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GGML_VENDOR_NO_FSYNC", "1")
    monkeypatch.delenv("GGML_VENDOR_MIRROR", raising=False)


@pytest.fixture
def proj(tmp_path: Path, up: FixtureRepo) -> Config:
    return config.load(make_project(tmp_path / "proj", str(up.path)))


def _env_for_child(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "300", **(extra or {})}
    env.pop("GGML_VENDOR_VERBOSE", None)
    return env


def cli(
    root: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The real command line, in a child process: what a user sees."""
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args, *(["-C", str(root)] if root else [])],
        capture_output=True,
        text=True,
        env=_env_for_child(env),
        cwd=cwd or root,
        timeout=120,
    )


def spawn(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit.cli", *args, "-C", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env_for_child(),
    )


def locked_commit(cfg: Config) -> str:
    return locked(cfg.vendor_dir).commit


# --- D1 / D2: configuration errors are one line, brackets included -------------------------------------


def test_d1_toml_syntax_error_is_one_line_exit_2(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.ggml-vendor\nname = "x"\n')
    res = cli(root, "sync", "--check")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "pyproject.toml" in lines[0] and "line 1" in lines[0] and "TOML" in lines[0]


def test_d2_bracketed_text_survives_in_messages(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    res = cli(empty, "sync", "--check")
    assert res.returncode == 2
    assert "no pyproject.toml with [tool.ggml-vendor] at or above" in res.stderr, res.stderr

    root = tmp_path / "noname"
    root.mkdir()
    (root / "pyproject.toml").write_text(
        RENDER_PYPROJECT.format(backends='"cuda"', archs='"9.0"').replace(
            'hub-repo = "example/ggml-attn-kernels"\n', ""
        )
    )
    res = cli(root, "sync", "--check")
    assert res.returncode == 2, res.stderr
    assert "add hub-repo = ... under [tool.ggml-vendor.packages.ggml-attn-kernels]" in res.stderr, res.stderr


def test_d2_variants_message_keeps_double_brackets(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "pyproject.toml").write_text(RENDER_PYPROJECT.format(backends='"cuda"', archs='"9.0"'))
    (root / "variants").mkdir()
    (root / "variants" / "ggml-attn-kernels.toml").write_text("# no rows\n")
    (root / "templates" / "ggml-attn-kernels").mkdir(parents=True)
    (root / "templates" / "ggml-attn-kernels" / "facts.py").write_text("")
    res = cli(root, "variants")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "no [[build]] rows" in res.stderr and "add at least one [[build]] table" in res.stderr, res.stderr


# --- D3: Ctrl-C around the swap reports the tree that is on disk ----------------------------------------


@pytest.mark.parametrize(
    "label,exchange,lands_on",
    [
        ("swapped", True, "v2"),
        ("cleaned", True, "v2"),
        ("new tree in place", False, "v2"),
        ("staged and verified", True, "v1"),
    ],
)
def test_d3_interrupt_reports_the_state_on_disk(
    proj: Config, up: FixtureRepo, label: str, exchange: bool, lands_on: str
) -> None:
    sync_project(proj, SyncRequest(rev="v1"))
    env = {INT_ENV: label, **({} if exchange else {"GGML_VENDOR_NO_EXCHANGE": "1"})}
    res = cli(proj.root, "sync", "--rev", "v2", env=env)
    assert res.returncode == 130, res.stdout + res.stderr
    on_disk = locked_commit(proj)
    assert on_disk == up.commits[lands_on]
    if lands_on == "v2":
        assert "previous" not in res.stderr and f"new pin {on_disk[:12]}" in res.stderr, res.stderr
    else:
        assert f"kept its previous pin {on_disk[:12]}" in res.stderr, res.stderr
    assert cli(proj.root, "sync", "--check").returncode == 0  # and the tree is consistent


@pytest.mark.parametrize("as_json", [False, True])
def test_interrupt_between_the_report_and_its_print_reports_the_new_pin(
    proj: Config, up: FixtureRepo, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """Ctrl-C after execute returned (the swap and drift report done) but before the report is printed:
    the line says vendor/ is at the new pin, not "previous state kept"."""
    from typer.testing import CliRunner

    from toolkit.cli import app
    from toolkit.commands import sync as sync_command
    from toolkit.core import ui

    sync_project(proj, SyncRequest(rev="v1"))

    def ctrl_c(*_args: object, **_kw: object) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr(ui if as_json else sync_command, "emit_json" if as_json else "_print_report", ctrl_c)
    res = CliRunner().invoke(app, ["sync", "--rev", "v2", "-C", str(proj.root), *(["--json"] if as_json else [])])
    assert res.exit_code == 130, res.output
    assert locked_commit(proj) == up.commits["v2"]
    assert "previous state kept" not in res.output and "previous pin" not in res.output, res.output
    assert f"new pin {up.commits['v2'][:12]}" in res.output and "the drift report is in" in res.output, res.output


def test_interrupt_while_planning_keeps_the_previous_state(
    proj: Config, up: FixtureRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from toolkit import sync
    from toolkit.cli import app

    sync_project(proj, SyncRequest(rev="v1"))

    def ctrl_c(*_args: object, **_kw: object) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr(sync, "plan", ctrl_c)
    res = CliRunner().invoke(app, ["sync", "--rev", "v2", "-C", str(proj.root)])
    assert res.exit_code == 130 and "previous state kept" in res.output, res.output
    assert locked_commit(proj) == up.commits["v1"]


# --- D4 / D5: a damaged lock ---------------------------------------------------------------------------


def _corrupt_sha(cfg: Config, path: str) -> None:
    lock = cfg.vendor_dir / LOCK_NAME
    text = lock.read_text()
    block = re.search(rf'\[files\."{re.escape(path)}"\]\nsha256 = "([0-9a-f]+)"', text)
    assert block, path
    good = block.group(1)
    lock.write_text(text.replace(good, ("0" if good[0] != "0" else "1") + good[1:], 1))


def test_d4_corrupted_sha_refused_by_sync_like_check(proj: Config, up: FixtureRepo) -> None:
    sync_project(proj, SyncRequest(rev="v1"))
    # LICENSE is the same at v1 and v2: the new tree would hold the same bytes
    assert git(up.path, "rev-parse", "v1:LICENSE") == git(up.path, "rev-parse", "v2:LICENSE")
    _corrupt_sha(proj, "LICENSE")
    before = (proj.vendor_dir / LOCK_NAME).read_bytes()
    check = cli(proj.root, "sync", "--check")
    assert check.returncode == 4 and "LICENSE" in check.stdout
    res = cli(proj.root, "sync", "--rev", "v2")
    assert res.returncode == 4, res.stdout + res.stderr
    assert "vendor/ggml/LICENSE" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert (proj.vendor_dir / LOCK_NAME).read_bytes() == before  # nothing written
    forced = cli(proj.root, "sync", "--rev", "v2", "--force")
    assert forced.returncode == 0 and cli(proj.root, "sync", "--check").returncode == 0


def test_d5_lock_commit_that_is_not_a_sha_is_a_corrupt_lock(proj: Config) -> None:
    sync_project(proj, SyncRequest(rev="v1"))
    lock = proj.vendor_dir / LOCK_NAME
    lock.write_text(re.sub(r'commit = "[0-9a-f]{40}"', 'commit = "zzzz"', lock.read_text(), count=1))
    res = cli(proj.root, "sync")
    assert res.returncode == 4, res.stdout + res.stderr
    assert "not a valid lock" in res.stderr and "zzzz" in res.stderr
    assert cli(proj.root, "sync", "--check").returncode == 4


# --- concurrency: one project lock for the whole command ------------------------------------------------


def _wait_for(proc: subprocess.Popen[str], needle: str, timeout: float = 60) -> str:
    """Read proc's stderr until `needle` shows (returns what was read) or the process ends."""
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                return seen
            continue
        seen += line
        if needle in line:
            return seen
    return seen


def test_noop_sync_is_judged_under_the_lock(proj: Config, up: FixtureRepo) -> None:
    """(a): while one sync moves the pin, a second that would find nothing to do waits, then reports what
    is on disk afterwards, never "already at A" over a tree at B."""
    sync_project(proj, SyncRequest(rev="v1"))
    with project_lock(proj.root, command="test"):
        second = spawn(proj.root, "sync", "--rev", "v1")
        seen = _wait_for(second, "waiting")
        assert "waiting" in seen, f"the second sync did not wait: {seen}{second.communicate()}"
        sync_project(proj, SyncRequest(rev="v2"))  # the first command moves the pin, holding the lock
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert locked_commit(proj) == up.commits["v1"]
    assert "already at" not in out and f"synced vendor/ to {up.commits['v1'][:12]}" in out, out


def test_two_writers_serialise_and_both_report_truthfully(proj: Config, up: FixtureRepo) -> None:
    """(b): two syncs to different pins both succeed one after the other; the last report is the disk."""
    sync_project(proj, SyncRequest(rev="v1"))
    with project_lock(proj.root, command="test"):
        a = spawn(proj.root, "sync", "--rev", "v2")
        assert "waiting" in _wait_for(a, "waiting")
        b = spawn(proj.root, "sync", "--rev", "v1b")
        assert "waiting" in _wait_for(b, "waiting")
    results = [(p, *p.communicate(timeout=120)) for p in (a, b)]
    for p, out, err in results:
        assert p.returncode == 0, err
        assert "failed verification" not in err and "[(" not in err
        assert "synced vendor/ to" in out, out  # each wrote its pin, one after the other
    assert cli(proj.root, "sync", "--check").returncode == 0
    final = locked_commit(proj)
    assert final in (up.commits["v2"], up.commits["v1b"])


@pytest.mark.parametrize(
    "args",
    [
        ("sync", "--rev", "v1"),
        ("sync", "--check"),
        ("render",),
        ("build",),
        ("verify",),
        ("publish", "--dry-run"),
        ("status",),
    ],
)
def test_no_wait_refuses_clearly_while_another_command_holds_the_project(proj: Config, args: tuple[str, ...]) -> None:
    sync_project(proj, SyncRequest(rev="v1"))
    before = (proj.vendor_dir / LOCK_NAME).read_bytes()
    with project_lock(proj.root, command="test"):
        res = cli(proj.root, *args, "--no-wait")
    assert res.returncode == 4, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "right now" in lines[0] and "--no-wait" in lines[0], res.stderr
    assert (proj.vendor_dir / LOCK_NAME).read_bytes() == before


# --- smaller fidelity bugs ------------------------------------------------------------------------------


def test_upstream_path_records_the_configured_url(tmp_path: Path, up: FixtureRepo) -> None:
    url = "https://example.invalid/ggml-org/ggml"
    cfg = config.load(make_project(tmp_path / "p", url))
    rep = sync_project(cfg, SyncRequest(rev="v1", upstream=str(up.path)))
    assert rep.plan is not None
    assert rep.plan.lock.upstream == url
    assert str(tmp_path) not in (cfg.vendor_dir / LOCK_NAME).read_text()


def test_upstream_path_records_the_clones_origin(tmp_path: Path, up: FixtureRepo) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--bare", str(up.path), str(clone))
    git(clone, "remote", "set-url", "origin", "https://example.invalid/someone/ggml.git")
    cfg = config.load(make_project(tmp_path / "p", str(up.path)))
    rep = sync_project(cfg, SyncRequest(rev="v1", upstream=str(clone)))
    assert rep.plan is not None
    assert rep.plan.lock.upstream == "https://example.invalid/someone/ggml.git"


def test_switching_to_another_clone_keeps_the_commit_list(tmp_path: Path, up: FixtureRepo) -> None:
    cfg = config.load(make_project(tmp_path / "p", str(up.path)))
    sync_project(cfg, SyncRequest(rev="v1"))
    other = tmp_path / "other-clone"
    git(tmp_path, "clone", "-q", "--bare", "--no-local", str(up.path), str(other))
    git(other, "remote", "remove", "origin")
    rep = sync_project(cfg, SyncRequest(rev="v2", upstream=str(other)))
    assert rep.drift is not None and rep.drift.commits is not None, rep.drift and rep.drift.history_note
    assert [c for c, _ in rep.drift.commits] == [up.commits["v2"], up.commits["v1b"]]


def test_llama_cpp_pin_names_both_commits_in_rendered_sources(tmp_path: Path) -> None:
    llama = build_upstream(tmp_path / "llama.cpp", "llama.cpp")
    ggml_sha = "ab" * 20
    (llama.path / "scripts").mkdir()
    (llama.path / "scripts" / "sync-ggml.last").write_text(ggml_sha + "\n")
    llama.commit("sync", "scripts : sync ggml")
    cfg = config.load(make_project(tmp_path / "p", str(llama.path)))
    plan = sync_project(cfg, SyncRequest(rev="master")).plan
    assert plan is not None
    lock = plan.lock
    assert lock.layout == "llama.cpp" and lock.ggml_commit == ggml_sha
    assert locked(cfg.vendor_dir).ggml_commit == ggml_sha  # round-trips through the lock file

    root = tmp_path / "render"
    root.mkdir()
    (root / "pyproject.toml").write_text(RENDER_PYPROJECT.format(backends='"cuda", "metal"', archs='"9.0"'))
    shutil.copytree(REPO / "templates", root / "templates")
    got = render.plan(config.load(root), lock).by_path()
    for path in ("csrc/cuda/gdn_kernels.cu", "csrc/cuda/fa_vec_kernels.cu", "csrc/metal/ggml_metal_kernels.metal"):
        text = got[path].content
        assert f"Vendored llama.cpp commit: {lock.commit}" in text, path
        assert f"ggml commit {ggml_sha}" in text and "Vendored ggml commit" not in text, path


def test_d2_verify_table_keeps_bracketed_findings() -> None:
    from rich.console import Console

    from toolkit.commands.verify import render_table
    from toolkit.verify.findings import Finding, VariantReport, VerifyReport

    finding = Finding("v", "metadata", "fail", "no [tool.ggml-vendor] name, archs ['9.0']", "add [general] name")
    report = VerifyReport((VariantReport("v", "/x", (finding,), "0" * 64),))
    console = Console(record=True, width=400)
    console.print(render_table(report))
    text = console.export_text()
    assert "no [tool.ggml-vendor] name" in text and "add [general] name" in text
