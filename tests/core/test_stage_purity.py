"""Every stage's plan is pure (toolkit/core/stage.py: a plan reads and decides; it installs nothing, writes
nothing, pushes nothing), proven on a real project: this repository's own pyproject.toml, templates and
matrix, synced from the embedded miniature and rendered, a git checkout with a verified variant in build/,
two CI artifacts (a directory and a .zip) to collect, and a local test Hub to publish to.

Every command of the app is planned exactly as the CLI plans it (its `Run.plan`, and the dry run's preview
and printed lines), once per package, while

* the network is closed: socket connect / connect_ex and getaddrinfo fail for every address but the local
  Hub's loopback port, and the Hub's request log shows that a publish plan only read;
* the filesystem is watched: the project tree (.git included), the artifacts, the upstream cache root and
  the user cache (core/paths.py; where provisioning installs toolchains and torch environments) and HOME are
  snapshot before and after (every path with its type, mode, size, mtime and sha256: a file written and
  removed again still changes its directory's mtime); the temporary directory must be left empty (collect
  unpacks a zip there to read it, and removes it). Making the trees read-only would prove nothing here: the
  tests may run as root, whom permissions do not stop;
* processes that install or fetch (pip, uv, venv/ensurepip, curl/wget, git fetch/clone/pull/push, git-lfs
  push) are refused and named.

The watcher itself is shown to catch a fake plan that writes a file, one that writes and removes a file in
the cache, one that connects out, one that starts `pip install` and one that leaves a temporary file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer.main

from tests.helpers import REPO_ROOT
from tests.helpers.fixture_repos import git
from tests.helpers.hubserver.variants import make_variant, provenance
from toolkit import __version__
from toolkit.app import Options, app
from toolkit.core import config, paths
from toolkit.core.errors import VendorError

TOKEN = "hf_purity_token"
V1 = "torch214-cxx11-cu130-x86_64-linux"  # in build/, verified
# From two "runners": the artifacts collect checks (one uploaded as a directory, one as a .zip).
V2 = "torch214-cxx11-cu130-aarch64-linux"
V3 = "torch213-cxx11-cu130-aarch64-linux"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed (fixture variants)")


# --- the watcher -----------------------------------------------------------------------------------------


def _entry(p: Path) -> tuple[int, int, int, int, str]:
    st = p.lstat()
    digest = hashlib.sha256(p.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else ""
    return (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns, digest)


def snapshot(roots: tuple[Path, ...]) -> dict[str, tuple[int, int, int, int, str] | None]:
    """Every path under the roots with its type, mode, size, mtime and content hash (None: the root is absent)."""
    out: dict[str, tuple[int, int, int, int, str] | None] = {}
    for root in roots:
        if not root.exists():
            out[str(root)] = None
            continue
        for p in (root, *root.rglob("*")):
            out[str(p)] = _entry(p)
    return out


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    changed = [f"written {p}" for p in sorted(after) if p in before and after[p] != before[p]]
    changed += [f"created {p}" for p in sorted(set(after) - set(before))]
    changed += [f"removed {p}" for p in sorted(set(before) - set(after))]
    return changed


def _installs_or_fetches(argv: list[str]) -> str | None:
    """Why a process is one a plan must not start (it installs or reaches the network), or None."""
    prog = Path(argv[0]).name if argv else ""
    if prog in ("pip", "pip3", "uv", "uvx", "curl", "wget"):
        return f"{prog} installs or downloads"
    for module in ("pip", "venv", "ensurepip", "uv"):
        if any(a == "-m" and b == module for a, b in zip(argv, argv[1:])):
            return f"python -m {module} installs"
    if prog == "git" and {"fetch", "clone", "pull", "push", "ls-remote"} & set(argv):
        return "git reaches a remote"
    if prog in ("git-lfs",) or (prog == "git" and "lfs" in argv and "push" in argv):
        return "git-lfs pushes"
    return None


@dataclass
class Watch:
    """What one plan did that a plan must not: filled in while it runs."""

    allowed: set[tuple[str, int]]
    connects: list[str] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)

    def impurities(self) -> list[str]:
        return [*self.changes, *self.leftovers, *self.connects, *self.processes]


def _close_network(monkeypatch: pytest.MonkeyPatch, watch: Watch) -> None:
    real_connect, real_connect_ex, real_getaddrinfo = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.getaddrinfo,
    )

    def allowed(address: Any) -> bool:
        return not isinstance(address, tuple) or (str(address[0]), int(address[1])) in watch.allowed

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not allowed(address):
            watch.connects.append(f"connected to {address!r}")
            raise ConnectionRefusedError(f"the network is closed to plans: {address!r}")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not allowed(address):
            watch.connects.append(f"connected to {address!r}")
            return 111  # ECONNREFUSED
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if (str(host), int(port or 0)) not in watch.allowed:
            watch.connects.append(f"resolved {host!r}")
            raise socket.gaierror(f"the network is closed to plans: {host!r}")
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def _refuse_installs(monkeypatch: pytest.MonkeyPatch, watch: Watch) -> None:
    real_init = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], args: Any, *a: Any, **k: Any) -> None:
        argv = [str(x) for x in args] if isinstance(args, (list, tuple)) else str(args).split()
        why = _installs_or_fetches(argv)
        if why:
            watch.processes.append(f"{why}: {' '.join(argv)}")
            raise PermissionError(f"plans install nothing and fetch nothing: {' '.join(argv)}")
        real_init(self, args, *a, **k)

    monkeypatch.setattr(subprocess.Popen, "__init__", init)


@dataclass(frozen=True)
class Observer:
    """Runs a callable with the network closed, installs refused and the trees watched."""

    roots: tuple[Path, ...]
    scratch: Path  # the temporary directory while it runs (must be left empty)
    allowed: frozenset[tuple[str, int]]

    def run(self, fn: Callable[[], Any]) -> tuple[Watch, Any]:
        watch = Watch(set(self.allowed))
        before = snapshot(self.roots)
        result: Any = None
        with pytest.MonkeyPatch.context() as mp:
            _close_network(mp, watch)
            _refuse_installs(mp, watch)
            mp.setattr(tempfile, "tempdir", str(self.scratch))
            mp.setenv("TMPDIR", str(self.scratch))
            try:
                result = fn()
            except VendorError as exc:  # a refusal is a decision too; it must be pure all the same
                result = exc
        watch.changes = _changes(before, snapshot(self.roots))
        watch.leftovers = [f"left in the temporary directory: {p}" for p in sorted(self.scratch.iterdir())]
        for p in self.scratch.iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        return watch, result


# --- the real project ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Project:
    cfg: config.Config
    artifacts: tuple[Path, ...]
    hub: Any  # the local HubServer
    observer: Observer


def _identity(cfg: config.Config) -> dict[str, Any]:
    from toolkit.build.inputs import load_project
    from toolkit.core.hashing import sha256_file
    from toolkit.core.lock import read_lock

    proj = load_project(cfg, tool_version=__version__)
    lock = read_lock(cfg.vendor_dir)
    assert lock is not None
    prov = provenance(commit=lock.commit, url=lock.upstream)
    prov["ggml-vendor"].update({"lock-sha256": sha256_file(cfg.vendor_dir / "UPSTREAM"), "source-id": proj.source_id})
    return {"uid": proj.uid, "prov": prov}


def _verified_variant(cfg: config.Config, build_dir: Path, variant: str) -> Path:
    from toolkit.verify import VerifyOptions, verify_build

    ident = _identity(cfg)
    make_variant(build_dir, variant=variant, uid=ident["uid"], module=cfg.module, name=cfg.name, prov=ident["prov"])
    assert verify_build(cfg, [variant], options=VerifyOptions(smoke=False, check_vendor=False), build_dir=build_dir).ok
    return build_dir / variant


def _artifact(cfg: config.Config, out: Path, variant: str) -> Path:
    """What one CI job uploads: its variant, verified on its runner, and the runner's .verified.json."""
    runner = out / f"runner-{variant}" / "build"
    _verified_variant(cfg, runner, variant)
    art = out / "artifacts" / variant
    shutil.copytree(runner / variant, art / variant)
    shutil.copy2(runner / ".verified.json", art / ".verified.json")
    shutil.rmtree(runner.parent)
    return art


def _zipped(art: Path) -> Path:
    zpath = art.with_name(f"{art.name}.zip")
    with zipfile.ZipFile(zpath, "w") as zf:
        for f in sorted(art.rglob("*")):
            zf.write(f, f.relative_to(art).as_posix())
    shutil.rmtree(art)
    return zpath


def _artifacts(cfg: config.Config, out: Path) -> tuple[Path, ...]:
    return _artifact(cfg, out, V2), _zipped(_artifact(cfg, out, V3))


def _real_project(base: Path) -> config.Config:
    """This repository's configuration, templates and matrix (what the demo copies), synced, rendered, committed,
    with a verified variant in build/."""
    from toolkit import render, sync
    from toolkit.demo.workspace import make_workspace
    from toolkit.sync.embedded import EMBEDDED, TAG

    root = make_workspace(REPO_ROOT, base / "project")
    cfg = config.load(root)
    sync.execute(sync.plan(cfg, sync.Request(rev=TAG, upstream=EMBEDDED)))
    cfg = config.load(root)
    for view in cfg.selected(()):
        render.execute(render.plan(view))
    (root / ".gitignore").write_text("build/\n.cache/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "the project")
    for view in cfg.selected(()):  # every package has a verified variant to verify and publish
        _verified_variant(view, view.build_dir, V1)
    return cfg


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    from toolkit.testing.hub_state import HubState
    from toolkit.testing.localhub import HubServer

    base = tmp_path_factory.mktemp("purity")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(paths.CACHE_ENV, str(base / "upstream-cache"))
        mp.setenv("HOME", str(base / "home"))
        (base / "home").mkdir()
        cfg = _real_project(base)
        artifacts = _artifacts(cfg, base / "ci")
        (base / "tmp").mkdir()
        with HubServer(HubState(tokens=(TOKEN,))) as hub:
            host, port = hub.url.removeprefix("http://").split(":")
            roots = (cfg.root, base / "ci", paths.cache_root(), paths.user_cache_dir(), base / "home")
            allowed = frozenset({(host, int(port.rstrip("/")))})
            yield Project(cfg, artifacts, hub, Observer(roots, base / "tmp", allowed))


# --- every command's plan --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    command: tuple[str, ...]
    make: Callable[[Project, Options], Any]  # -> the command's Run
    check: Callable[[Project, Any], None]  # what the plan must say (it decided, or refused as it should)
    prepare: Callable[[Project], Callable[[], None]] | None = None  # state the plan needs; returns its undo


def _fn(module: str, name: str) -> Any:
    import importlib

    return getattr(importlib.import_module(f"toolkit.commands.{module}"), name)


def _build_all(p: Project, plan: Any) -> None:
    _is_a_plan(p, plan)
    # --all implies provisioning: what this host lacks is planned as install steps, none carried out (a host
    # that lacked nothing would plan none)
    assert plan.request.provisioning, "--all must imply provisioning"
    assert plan.installs or all(v.status.buildable for v in plan.plan.variants), plan.lines()[-1]


def _publish_read_only(p: Project, plan: Any) -> None:
    _is_a_plan(p, plan)
    assert plan.lines(), "the plan names what it would push"
    requests = [(m, path) for m, path, _auth in p.hub.state.requests]
    assert requests, "the plan did not read the live repository (the local Hub is the one port left open)"
    assert {m for m, _ in requests} <= {"GET", "HEAD"}, f"a publish plan wrote to the Hub: {requests}"


def _collect_admits(p: Project, plan: Any) -> None:
    if plan.cfg.name != p.cfg.name:  # the artifacts are the first package's: another package's collect refuses them
        assert not plan.ok and any("foreign" in line for line in plan.lines()), plan.lines()
        return
    assert plan.ok, plan.lines()
    assert sorted((i.variant, i.action) for i in plan.incoming) == [(V3, "add"), (V2, "add")]


def _is_a_plan(p: Project, plan: Any) -> None:
    assert not isinstance(plan, VendorError), plan.one_line()


GDN = "src/ggml-cuda/gated_delta_net.cu"


def _reads_the_index_later(p: Project, plan: Any) -> None:
    _is_a_plan(p, plan)
    assert any(step.startswith("read torch releases from") for step in plan.first), plan.lines()


def _edited(p: Project) -> Callable[[], None]:
    """An edit in vendor/ggml for `patch save` to plan a patch of."""
    path = p.cfg.vendor_dir / "ggml" / GDN
    text = path.read_text()
    path.write_text(text + "// ours\n")

    def restore() -> None:
        path.write_text(text)

    return restore


def _saved(p: Project) -> Callable[[], None]:
    """A saved patch for `patch drop` to plan the removal of (carried out here, undone after)."""
    from toolkit.sync import patch_workflow as wf

    restore = _edited(p)
    wf.execute_save(wf.plan_save(p.cfg, "purity", "cuda: a comment"))

    def undo() -> None:
        wf.execute_drop(wf.plan_drop(p.cfg, "purity"))
        restore()

    return undo


def _saves(p: Project, plan: Any) -> None:
    _is_a_plan(p, plan)
    assert plan.lines()[0].startswith("would save vendor/patches/0001-purity.patch"), plan.lines()


def _half_swapped(p: Project) -> Callable[[], None]:
    """vendor/ as a sync SIGKILLed inside its journaled swap leaves it (toolkit.core.fs._journaled_swap): the old
    tree moved aside, the journal naming it and its dead writer, no vendor/ yet. Recovery would put the old tree
    back, so a plan that recovers writes the project; a pure plan reads the old tree where it lies."""
    from toolkit.core import fs

    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()  # a pid that no longer runs: recovery acts on its journal
    vendor = p.cfg.vendor_dir
    old = vendor.with_name(f"{fs.old_prefix(vendor)}{dead.pid}-0123abcd")
    vendor.rename(old)
    fs.journal_path(vendor).write_text(json.dumps({"old": old.name, "new": ".vendor.stage-x", "pid": dead.pid}))

    def undo() -> None:
        if old.is_dir():  # the plan left the half swap where it was (else the assertion below already fails)
            old.rename(vendor)
        fs.journal_path(vendor).unlink(missing_ok=True)

    return undo


def _drops(p: Project, plan: Any) -> None:
    _is_a_plan(p, plan)
    assert plan.lines() == ["would drop vendor/patches/0001-purity.patch"]


CASES: tuple[Case, ...] = (
    Case(("sync",), lambda p, o: _fn("sync", "sync")(o), _is_a_plan),
    Case(("sync",), lambda p, o: _fn("sync", "sync")(o, rev="HEAD", force=True), _is_a_plan),
    Case(("sync",), lambda p, o: _fn("sync", "sync")(o, check=True), _is_a_plan),
    Case(("status",), lambda p, o: _fn("status", "status")(o), _is_a_plan),
    # A killed sync's half swap: planning reads the tree recovery would restore and recovers nothing (only
    # execute does), for every command that reads vendor/.
    Case(("sync",), lambda p, o: _fn("sync", "sync")(o), _is_a_plan, prepare=_half_swapped),
    Case(("sync",), lambda p, o: _fn("sync", "sync")(o, check=True), _is_a_plan, prepare=_half_swapped),
    Case(("status",), lambda p, o: _fn("status", "status")(o), _is_a_plan, prepare=_half_swapped),
    Case(("verify",), lambda p, o: _fn("verify", "verify")(o), _is_a_plan, prepare=_half_swapped),
    Case(
        ("publish",),
        lambda p, o: _fn("publish", "publish")(o, endpoint=p.hub.url, token=TOKEN, to=None),
        _publish_read_only,
        prepare=_half_swapped,
    ),
    Case(("patch", "list"), lambda p, o: _fn("patch", "list_")(o), _is_a_plan),
    Case(
        ("patch", "save"),
        lambda p, o: _fn("patch", "save")(o, name="purity", message="cuda: a comment"),
        _saves,
        prepare=_edited,
    ),
    Case(("patch", "drop"), lambda p, o: _fn("patch", "drop")(o, name="purity"), _drops, prepare=_saved),
    Case(("render",), lambda p, o: _fn("render", "render")(o), _is_a_plan),
    Case(("render",), lambda p, o: _fn("render", "render")(o, check=True), _is_a_plan),
    Case(("variants",), lambda p, o: _fn("variants", "variants")(o), _is_a_plan),
    Case(("build",), lambda p, o: _fn("build", "build")(o), _is_a_plan),
    Case(("build",), lambda p, o: _fn("build", "build")(o, all_variants=True), _build_all),
    Case(("build",), lambda p, o: _fn("build", "build")(o, all_variants=True, create_envs=True), _build_all),
    Case(("verify",), lambda p, o: _fn("verify", "verify")(o), _is_a_plan),
    Case(
        ("publish",),
        lambda p, o: _fn("publish", "publish")(o, endpoint=p.hub.url, token=TOKEN, to=None),
        _publish_read_only,
    ),
    Case(("collect",), lambda p, o: _fn("collect", "collect_cmd")(o, artifacts=list(p.artifacts)), _collect_admits),
    Case(("ci",), lambda p, o: _fn("ci", "ci")(o), _is_a_plan),
    Case(("ci",), lambda p, o: _fn("ci", "ci")(o, check=True), _is_a_plan),
    Case(
        ("init",),
        lambda p, o: _fn("init", "init")(o, name="purity-kernels", op=[f"scale={GDN}"]),
        _is_a_plan,
    ),
    Case(("demo",), lambda p, o: _fn("demo", "demo")(o), _is_a_plan),
    Case(("outdated",), lambda p, o: _fn("outdated", "outdated")(o), _is_a_plan),
    Case(("update",), lambda p, o: _fn("update", "update")(o), _is_a_plan),
    Case(("update",), lambda p, o: _fn("update", "update")(o, torch=True), _reads_the_index_later),
)


def _leaf_commands() -> set[tuple[str, ...]]:
    import toolkit.cli as cli

    cli._register([])  # every command module registers its command
    out: set[tuple[str, ...]] = set()
    for name, cmd in typer.main.get_command(app).commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", {})
        out |= {(name, sub) for sub in subs} if subs else {(name,)}
    return out


def _per_package(command: tuple[str, ...]) -> bool:
    group: Any = typer.main.get_command(app)
    for word in command:
        group = group.commands[word]
    return any(param.name == "package" for param in group.params)


def _plan_as_the_cli_does(p: Project, case: Case) -> list[Any]:
    """The command's Run planned for each package (a per-package command) or the project, then what its
    dry run prints: the preview and the lines / JSON document."""
    run = case.make(p, Options(project=p.cfg.root, dry_run=True))
    views = p.cfg.selected(()) if _per_package(case.command) else (p.cfg,)
    plans = []
    for view in views if run.config else (None,):
        plan = run.planned(view, lambda _line: None)
        shown = run.shown(plan)
        shown.to_json()
        if hasattr(shown, "lines"):
            shown.lines()
        plans.append(plan)
    return plans


def test_every_command_has_a_purity_case() -> None:
    assert {c.command for c in CASES} == _leaf_commands()


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(c.command) + f"#{CASES.index(c)}")
def test_every_plan_writes_installs_and_fetches_nothing(project: Project, case: Case) -> None:
    undo = case.prepare(project) if case.prepare else None
    try:
        watch, result = project.observer.run(lambda: _plan_as_the_cli_does(project, case))
    finally:
        if undo is not None:
            undo()
    assert not watch.impurities(), f"{' '.join(case.command)}: " + "\n".join(watch.impurities()[:20])
    for plan in result if isinstance(result, list) else [result]:
        case.check(project, plan)


# --- the watcher catches an impure plan ------------------------------------------------------------------


@dataclass(frozen=True)
class FakePlan:
    """What an impure stage's plan returns (printable like any plan)."""

    def lines(self) -> list[str]:
        return ["fake"]

    def to_json(self) -> dict[str, Any]:
        return {}


def _writes_into_build(cfg: config.Config, log: Any) -> FakePlan:
    (cfg.build_dir / "plan-was-here").write_text("x")
    return FakePlan()


def _writes_and_removes_in_the_cache(cfg: config.Config, log: Any) -> FakePlan:
    probe = paths.cache_root() / "probe"
    probe.write_text("x")
    probe.unlink()
    return FakePlan()


def _connects_out(cfg: config.Config, log: Any) -> FakePlan:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, contextlib.suppress(OSError):
        s.connect(("192.0.2.1", 443))  # TEST-NET-1: never a real host
    return FakePlan()


def _pip_installs(cfg: config.Config, log: Any) -> FakePlan:
    with contextlib.suppress(PermissionError):
        subprocess.run(["pip", "install", "ziglang"], check=False)
    return FakePlan()


def _leaves_a_temporary_file(cfg: config.Config, log: Any) -> FakePlan:
    os.close(tempfile.mkstemp(prefix="left-")[0])
    return FakePlan()


IMPURE = {
    "writes into build/": (_writes_into_build, "created"),
    "writes and removes a file in the cache": (_writes_and_removes_in_the_cache, "written"),
    "connects out": (_connects_out, "connected to"),
    "starts pip install": (_pip_installs, "pip installs or downloads"),
    "leaves a temporary file": (_leaves_a_temporary_file, "left in the temporary directory"),
}


@pytest.mark.parametrize("name", sorted(IMPURE))
def test_the_watcher_catches_an_impure_plan(project: Project, name: str) -> None:
    """A fake stage whose plan does one forbidden thing, planned through the same path as every case above."""
    from toolkit.app import Run

    impure, says = IMPURE[name]
    case = Case(("status",), lambda p, o: Run("an impure stage", plan=impure), _is_a_plan)
    watch, _ = project.observer.run(lambda: _plan_as_the_cli_does(project, case))
    assert any(says in line for line in watch.impurities()), (name, watch.impurities())
    for line in watch.changes:  # put the tree back for the cases after this one
        path = Path(line.split(" ", 1)[1])
        if line.startswith("created") and path.is_file():
            path.unlink()
