"""publish: the pure plan, every refusal (nothing pushed), the HTTP transport against the local Hub with the
real huggingface_hub client, then the real kernels.get_kernel in a fresh process; interruption and resume,
--create-pr, the parent_commit guard, the token never shown, and the git transport against a bare repo."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.helpers.hubserver import HubServer, HubState
from tests.helpers.hubserver.variants import (
    NAME,
    host_variant_name,
    make_variant,
    provenance,
    write_lock,
    write_metadata,
    write_project,
)
from tests.helpers.machine import requires_torch
from toolkit.core import config
from toolkit.core.config import Config
from toolkit.core.errors import PublishError
from toolkit.core.hashing import git_blob_id
from toolkit.core.kernels_client import list_variants_argv
from toolkit.publish.diff import (
    ADD,
    DELETE,
    UNCHANGED,
    LocalFile,
    RemoteFile,
    batches,
    card_file,
    make_plan,
    plan_branch,
)
from toolkit.publish.stage import Plan, PublishResult
from toolkit.testing.localhub import client_env
from toolkit.verify import VerifyOptions, verify_build

TOKEN = "hf_test_token"
REPO = "ggml-test/ggml-attn-kernels"
NO_VENDOR = VerifyOptions(check_vendor=False, smoke=False)


def _lf(path: str, data: bytes) -> LocalFile:
    import hashlib

    return LocalFile(path, "", len(data), hashlib.sha256(data).hexdigest(), git_blob_id(data))


def _rf(path: str, data: bytes, lfs: bool) -> RemoteFile:
    import hashlib

    return RemoteFile(path, len(data), git_blob_id(data), hashlib.sha256(data).hexdigest() if lfs else None)


# --- the pure plan ---------------------------------------------------------------------------------------


def test_plan_existing_branch_touches_only_uploaded_variants() -> None:
    local = [_lf("build/A/x.so", b"\x7fELF-new"), _lf("build/A/__init__.py", b"same")]
    remote = {
        "build/A/x.so": _rf("build/A/x.so", b"\x7fELF-old", True),
        "build/A/__init__.py": _rf("build/A/__init__.py", b"same", False),
        "build/A/stale.py": _rf("build/A/stale.py", b"old", False),
        "build/B/y.so": _rf("build/B/y.so", b"\x7fELF-b", True),
        "benchmarks/benchmark.py": _rf("benchmarks/benchmark.py", b"b", False),
    }
    bp = plan_branch("v1", local, remote, ["A"])
    assert {a.path for a in bp.of(ADD)} == {"build/A/x.so"}
    assert {a.path for a in bp.of(UNCHANGED)} == {"build/A/__init__.py"}
    assert {a.path for a in bp.of(DELETE)} == {"build/A/stale.py"}  # B and benchmarks are left alone


def test_plan_new_branch_prunes_what_it_inherits_from_main() -> None:
    main = {"README.md": _rf("README.md", b"card", False), "build/old/x.so": _rf("build/old/x.so", b"\x7fELF", True)}
    bp = plan_branch("v1", [_lf("build/A/x.so", b"\x7fELF")], None, ["A"], base_for_new=main)
    assert not bp.exists
    assert [a.path for a in bp.of(DELETE)] == ["build/old/x.so"]
    # identical bytes already on main count as unchanged once the branch is cut from it
    assert [a.path for a in bp.of(UNCHANGED)] == []
    assert [a.path for a in bp.of(ADD)] == ["build/A/x.so"]


def test_plan_card_and_batches() -> None:
    text = "---\nlibrary_name: kernels\n---\n# card\n"
    plan = make_plan(
        repo_id="o/r",
        target="t",
        version=1,
        branch="v1",
        variants=["A"],
        files=[_lf(f"build/A/f{i}.py", bytes([i])) for i in range(5)],
        card_text=text,
        remote_branch={},
        remote_main={"README.md": _rf("README.md", text.encode(), False)},
    )
    assert plan.branches[1].branch == "main" and plan.branches[1].of(UNCHANGED)[0].path == "README.md"
    assert [len(b) for b in batches(plan.branches[0].actions, 2)] == [2, 2, 1]
    assert card_file(text).git_blob == git_blob_id(text.encode())
    assert "branch v1 (existing): 5 to add, 0 to delete, 0 unchanged" in "\n".join(plan.lines())


# --- helpers ---------------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Config:
    root = write_project(tmp_path / "proj", hub_repo=REPO)
    cfg = config.load(root)
    make_variant(root / "build" / NAME)
    assert verify_build(cfg, options=NO_VENDOR).ok
    return cfg


@pytest.fixture
def hub() -> Iterator[HubServer]:
    with HubServer(HubState(tokens=(TOKEN,))) as h:
        yield h


def _publish(cfg: Config, hub: HubServer, *, dry_run: bool = False, **kw: Any) -> PublishResult:
    """The stage as the CLI runs it: plan, then (unless a dry run) execute that plan."""
    from toolkit import publish

    kw.setdefault("token", TOKEN)
    plan = publish.plan(cfg, publish.Request(endpoint=hub.url, check_vendor=False, **kw))
    return plan.preview if dry_run else publish.execute(plan)


def _publish_git(cfg: Config, remote: str, *, dry_run: bool = False) -> PublishResult:
    from toolkit import publish

    plan = publish.plan(cfg, publish.Request(to=remote, check_vendor=False))
    return plan.preview if dry_run else publish.execute(plan)


def _writes(hub: HubServer) -> list[tuple[str, str, str | None]]:
    return [r for r in hub.state.requests if r[0] in ("POST", "PUT", "DELETE") and "validate-yaml" not in r[1]]


def _load_in_fresh_process(hub: HubServer, cache: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = client_env(hub.url, cache)
    env.pop("HF_TOKEN", None)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


# --- the full user path ----------------------------------------------------------------------------------


@requires_torch
def test_publish_then_get_kernel_in_a_fresh_process(project: Config, hub: HubServer, tmp_path: Path) -> None:
    result = _publish(project, hub)
    assert result.status == "published" and result.verified["ok"]
    variant = host_variant_name()
    repo = hub.state.repo("kernel", REPO)
    assert set(repo.branches) >= {"main", "v1"}
    v1 = hub.state.history("kernel", REPO, "v1")[0].files
    so = f"build/{variant}/_ggml_attn_kernels_cuda_fx00001.abi3.so"
    assert v1[so].sha256 is not None, "the binary must be stored through LFS"
    assert hub.state.read("kernel", REPO, "v1", so) == (project.build_dir / variant / so.split("/")[-1]).read_bytes()
    card = hub.state.read("kernel", REPO, "main", "README.md").decode()
    assert "library_name: kernels" in card and "`scale`" in card and variant in card and "version=1" in card
    report = json.loads((project.build_dir / "publish-report.json").read_text())
    assert report["status"] == "published" and report["verified"]["files_checked"] == 7  # + 2 rendered source files
    assert (
        hub.state.read("kernel", REPO, "v1", "torch-ext/registration.h")
        == (project.package_root / "torch-ext" / "registration.h").read_bytes()
    )  # the rendered source beside the variants, as a kernel-builder repository holds it

    code = (
        "import torch, kernels\n"
        f"k = kernels.get_kernel({REPO!r}, version=1, trust_remote_code=True)\n"
        "print('RESULT', k.__name__, k.scale(torch.arange(3.0), 2.0).tolist())\n"
    )
    proc = _load_in_fresh_process(hub, tmp_path / "cache", code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RESULT _ggml_attn_kernels_cuda_fx00001 [0.0, 2.0, 4.0]" in proc.stdout
    # it resolved v1 through refs, listed build/, and downloaded the variant from our server
    paths = [r[1] for r in hub.state.requests]
    assert any(p.endswith(f"/api/kernels/{REPO}/refs") for p in paths)
    assert any("/tree/" in p and "/build" in p for p in paths)
    assert any("/resolve/" in p and so.split("/")[-1] in p for p in paths)
    # untrusted publisher without trust_remote_code: kernels refuses (our server says the org is unknown)
    proc = _load_in_fresh_process(hub, tmp_path / "cache2", f"import kernels; kernels.get_kernel({REPO!r}, version=1)")
    assert proc.returncode != 0 and "trust" in proc.stderr


@requires_torch
def test_kernels_cli_lists_what_was_published(project: Config, hub: HubServer, tmp_path: Path) -> None:
    # kernels' own console script: `kernels variants --all-versions` from 0.18 (`kernels versions` before; it is
    # deprecated in 0.18 and removed in 0.20). Both ask for the tree of each version by its full ref.
    _publish(project, hub)
    script = Path(sys.executable).with_name("kernels")
    if not script.exists():
        pytest.skip("kernels' console script is not installed beside this Python")
    env = client_env(hub.url, tmp_path / "cache")
    env.pop("HF_TOKEN", None)
    argv = [str(script), *list_variants_argv(REPO)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Version 1" in proc.stdout and host_variant_name() in proc.stdout, proc.stdout
    assert any("/tree/refs%2Fheads%2Fv1/build" in r[1] for r in hub.state.requests)


def test_second_publish_is_a_no_op(project: Config, hub: HubServer) -> None:
    first = _publish(project, hub)
    before = len(_writes(hub))
    commits_before = len(hub.state.history("kernel", REPO, "v1"))
    again = _publish(project, hub)
    assert again.status == "up-to-date" and again.commits == ()
    assert all(a.action == UNCHANGED for b in again.plan.branches for a in b.actions)
    assert [r for r in _writes(hub)[before:] if "/commit/" in r[1]] == []
    assert len(hub.state.history("kernel", REPO, "v1")) == commits_before
    assert first.commits


def test_dry_run_pushes_nothing(project: Config, hub: HubServer, capsys: pytest.CaptureFixture[str]) -> None:
    result = _publish(project, hub, dry_run=True)
    assert result.status == "dry-run"
    assert {a.action for a in result.plan.branches[0].actions} == {ADD}
    assert hub.state.repos == {} and _writes(hub) == []


# --- refusals: nothing pushed -----------------------------------------------------------------------------


def test_refuses_unverified_and_changed_builds(project: Config, hub: HubServer) -> None:
    variant = project.build_dir / host_variant_name()
    (variant / "extra.py").write_text("x = 1\n")
    with pytest.raises(PublishError, match="unverified .*changed since it was verified"):
        _publish(project, hub)
    (project.build_dir / ".verified.json").unlink()
    with pytest.raises(PublishError, match="never verified"):
        _publish(project, hub)
    assert hub.state.repos == {} and _writes(hub) == []


def test_refuses_dirty_builds_mixed_versions_and_stubs(tmp_path: Path, hub: HubServer) -> None:
    root = write_project(tmp_path / "p", hub_repo=REPO)
    cfg = config.load(root)
    make_variant(root / "build" / NAME, prov=provenance(dirty=True))
    verify_build(cfg, options=NO_VENDOR)
    with pytest.raises(PublishError, match="dirty build"):
        _publish(cfg, hub)
    # built from a checkout with uncommitted changes (vendor/ itself clean): refused too, as the docs say
    make_variant(root / "build" / NAME, prov=provenance(checkout_dirty=True))
    verify_build(cfg, options=NO_VENDOR)
    with pytest.raises(PublishError, match="built from a checkout with uncommitted changes"):
        _publish(cfg, hub)
    with pytest.raises(PublishError, match="uncommitted changes"):
        _publish(cfg, hub, dry_run=True)
    make_variant(root / "build" / NAME, prov=provenance(checkout_dirty=False))
    assert verify_build(cfg, options=NO_VENDOR).ok
    assert _publish(cfg, hub, dry_run=True).status == "dry-run"
    make_variant(root / "build" / NAME)
    make_variant(root / "build" / NAME, variant="torch213-cxx11-cu130-x86_64-linux", version=2, uid="fx2")
    with pytest.raises(PublishError, match="mixed versions"):
        _publish(cfg, hub)
    # A stub that slipped in after verify (e.g. a re-checkout without git-lfs) is caught again here.
    import shutil

    shutil.rmtree(root / "build" / NAME / "torch213-cxx11-cu130-x86_64-linux")
    v = root / "build" / NAME / host_variant_name()
    assert verify_build(cfg, options=NO_VENDOR).ok
    so = next(v.glob("*.so"))
    so.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 1\n")
    with pytest.raises(PublishError, match="Git LFS pointer stub"):
        _publish(cfg, hub)
    assert hub.state.repos == {} and _writes(hub) == []


def test_refuses_without_a_token(
    project: Config, hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with pytest.raises(PublishError, match="no Hugging Face token"):
        _publish(project, hub, token=None)
    assert hub.state.repos == {} and _writes(hub) == []


@pytest.mark.parametrize("kind", ["link-out", "fifo", "variant-link"])
def test_refuses_entries_that_are_not_regular_files_even_after_verify(
    project: Config, hub: HubServer, tmp_path: Path, kind: str
) -> None:
    """Issue 33 item 6: a link made after verify passed (to a file outside the project with the very bytes
    verify hashed, or build/<variant> itself moved elsewhere and linked back) or a named pipe is refused;
    nothing is opened through it, nothing pushed."""
    import os

    vd = project.build_dir / host_variant_name()
    if kind == "variant-link":
        shutil.move(vd, tmp_path / vd.name)
        vd.symlink_to(tmp_path / vd.name)
    elif kind == "link-out":
        outside = tmp_path / "outside.py"
        outside.write_bytes((vd / "__init__.py").read_bytes())
        (vd / "__init__.py").unlink()
        (vd / "__init__.py").symlink_to(outside)
    else:
        os.mkfifo(vd / "pipe.bin")
    with pytest.raises(PublishError, match="holds entries that are not regular files") as exc:
        _publish(project, hub)
    assert ("named pipe" if kind == "fifo" else "symbolic link") in exc.value.message
    assert _writes(hub) == []


def test_rejected_token_is_reported_and_never_printed(project: Config, hub: HubServer) -> None:
    secret = "hf_" + "S3cr3t" * 6
    proc = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "publish", "-C", str(project.root), "--endpoint", hub.url],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_TOKEN": secret, "GGML_VENDOR_VERBOSE": ""},
    )
    # the project fixture has no vendor lock: publish refuses on that first, before any network call
    assert proc.returncode == 9
    assert secret not in proc.stdout + proc.stderr
    with pytest.raises(PublishError, match="rejected the token") as exc:
        _publish(project, hub, token=secret)
    assert secret not in str(exc.value)
    # it was sent (as a bearer token), not leaked anywhere else
    assert any(r[2] == f"Bearer {secret}" for r in hub.state.requests)


def test_cli_publish_token_not_in_output_or_report(tmp_path: Path, hub: HubServer) -> None:

    root = write_project(tmp_path / "p", hub_repo=REPO)
    write_lock(root, date="2026-01-01", subject="pin")
    cfg = config.load(root)
    make_variant(root / "build" / NAME)
    assert verify_build(cfg, options=VerifyOptions(smoke=False)).ok
    hub.state.tokens.add("hf_cli_S3cr3t_T0ken")
    env = {**os.environ, "HF_TOKEN": "hf_cli_S3cr3t_T0ken"}
    proc = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "publish", "-C", str(root), "--endpoint", hub.url, "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "published" and doc["verified"]["ok"]
    report = (root / "build" / NAME / "publish-report.json").read_text()
    for text in (proc.stdout, proc.stderr, report):
        assert "hf_cli_S3cr3t_T0ken" not in text
    card = hub.state.read("kernel", REPO, "main", "README.md").decode()
    assert provenance()["ggml-vendor"]["upstream"]["commit"] in card  # the upstream pin from vendor/UPSTREAM


# --- interruption, PRs, concurrency, stale files ---------------------------------------------------------


def test_interrupted_publish_resumes_without_duplicates(project: Config, hub: HubServer) -> None:
    hub.state.fail_next["commit"] = 0
    calls = {"n": 0}

    def second_commit_dies(method: str, path: str) -> None:
        if method == "POST" and "/commit/" in path:
            calls["n"] += 1
            if calls["n"] == 2:
                from toolkit.testing.hub_state import HubError

                raise HubError(500, "connection dropped (injected)")

    hub.state.hooks.append(second_commit_dies)
    with pytest.raises(PublishError, match="re-run ggml-vendor publish"):
        _publish(project, hub, batch_size=2)
    partial = hub.state.history("kernel", REPO, "v1")[0].files
    build_files = [p for p in partial if p.startswith("build/")]
    assert len(build_files) == 2  # the first batch landed, the second did not
    hub.state.hooks.clear()
    resumed = _publish(project, hub, batch_size=2)
    assert resumed.status == "published" and resumed.verified["ok"]
    adds = {a.path for a in resumed.plan.branches[0].of(ADD)}
    assert not adds & set(build_files), "files committed before the interruption were uploaded again"
    final = hub.state.history("kernel", REPO, "v1")[0].files
    assert len([p for p in final if p.startswith("build/")]) == 4
    assert _publish(project, hub).status == "up-to-date"


def _ctrl_c(*_a: object, **_k: object) -> NoReturn:
    raise KeyboardInterrupt


@pytest.mark.parametrize("lands", ["while printing", "before any push", "between branches"])
def test_ctrl_c_says_what_the_hub_holds_read_back(
    tmp_path: Path, hub: HubServer, monkeypatch: pytest.MonkeyPatch, lands: str
) -> None:
    """Issue 33 item 3: a Ctrl-C once the plan is made says what the Hub holds, read back from it, never
    "previous state kept" after the push."""
    from typer.testing import CliRunner

    from toolkit.cli import app
    from toolkit.commands import publish as publish_command
    from toolkit.publish import hub as hub_mod

    root = write_project(tmp_path / "p", hub_repo=REPO)
    write_lock(root, date="2026-01-01", subject="pin")
    make_variant(root / "build" / NAME)
    assert verify_build(config.load(root), options=VerifyOptions(smoke=False)).ok
    if lands == "while printing":
        monkeypatch.setattr(publish_command, "_show", _ctrl_c)
    elif lands == "before any push":
        monkeypatch.setattr(hub_mod, "_ensure_branches", _ctrl_c)
    else:
        real = hub_mod._push_branch

        def first_branch_only(api: Any, plan: Plan, branch: str, *rest: Any) -> tuple[list[str], list[str], str]:
            if branch == "main":
                raise KeyboardInterrupt
            return real(api, plan, branch, *rest)

        monkeypatch.setattr(hub_mod, "_push_branch", first_branch_only)
    res = CliRunner().invoke(app, ["publish", "-C", str(root), "--endpoint", hub.url, "--token", TOKEN])
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]  # after the progress lines (publish shows them as they happen)
    assert last.startswith("interrupted:"), res.output
    expected = {
        "while printing": "holds this publish (v1, main read back, every file as in build/): it had completed",
        "before any push": "nothing was pushed",
        "between branches": "holds part of this publish (v1 complete; main not yet pushed, read back)",
    }[lands]
    assert expected in last, res.output


def test_parent_commit_guard_refuses_a_moved_branch(project: Config, hub: HubServer) -> None:
    _publish(project, hub)
    variant = project.build_dir / host_variant_name()
    (variant / "extra.py").write_text("EXTRA = 1\n")
    write_metadata(variant, ident="_ggml_attn_kernels_cuda_fx00001", backend="cuda", archs=["8.0", "9.0"])
    assert verify_build(project, options=NO_VENDOR).ok

    def someone_else_pushes(method: str, path: str) -> None:
        if method == "POST" and "/commit/v1" in path:
            st = hub.state
            repo = st.repo("kernel", REPO)
            head = repo.commits[repo.branches["v1"]]
            repo.branches["v1"] = st.new_commit(repo, head.oid, dict(head.files), "concurrent push").oid
            hub.state.hooks.clear()

    hub.state.hooks.append(someone_else_pushes)
    with pytest.raises(PublishError, match="branch moved"):
        _publish(project, hub)
    assert "build/" + variant.name + "/extra.py" not in hub.state.history("kernel", REPO, "v1")[0].files
    assert _publish(project, hub).verified["ok"]  # re-running on the new head succeeds


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(root.rglob("*"))}


def test_plan_only_reads_and_execute_pushes_exactly_its_batches(project: Config, hub: HubServer) -> None:
    from toolkit import publish

    before = _snapshot(project.root)
    plan = publish.plan(project, publish.Request(endpoint=hub.url, token=TOKEN, check_vendor=False, batch_size=2))
    assert _snapshot(project.root) == before, "plan wrote into the project"
    assert hub.state.repos == {} and _writes(hub) == [], "plan wrote to the Hub"
    batches_v1 = plan.commit_batches["v1"]
    assert [len(b) for b in batches_v1] == [2, 2, 2] and plan.to_json()["status"] == "dry-run"
    assert plan.lines() == plan.preview.plan.lines() and "branch v1 (new)" in plan.lines()[1]
    assert TOKEN not in repr(plan) and TOKEN not in json.dumps(plan.to_json())
    report = publish.execute(plan)
    assert report.ok and report.exit_code == 0 and report.status == "published"
    history = hub.state.history("kernel", REPO, "v1")
    pushed = [c for c in history if c.title.startswith("Upload")]
    assert len(pushed) == len(batches_v1)  # one commit per planned batch, newest first
    assert all(f"(batch {i + 1}/3)" in c.title for i, c in enumerate(reversed(pushed)))
    assert report.lines()[0].startswith(f"publish {REPO} (")


def test_execute_refuses_a_branch_that_moved_since_the_plan(project: Config, hub: HubServer) -> None:
    from toolkit import publish

    _publish(project, hub)
    variant = project.build_dir / host_variant_name()
    (variant / "extra.py").write_text("EXTRA = 1\n")
    write_metadata(variant, ident="_ggml_attn_kernels_cuda_fx00001", backend="cuda", archs=["8.0", "9.0"])
    assert verify_build(project, options=NO_VENDOR).ok
    plan = publish.plan(project, publish.Request(endpoint=hub.url, token=TOKEN, check_vendor=False))
    st = hub.state
    repo = st.repo("kernel", REPO)
    head = repo.commits[repo.branches["v1"]]
    moved = st.new_commit(repo, head.oid, dict(head.files), "someone else's push").oid
    repo.branches["v1"] = moved
    with pytest.raises(PublishError, match="branch moved"):
        publish.execute(plan)
    assert repo.branches["v1"] == moved  # their push is kept, ours was not laid over it


def test_create_pr_leaves_the_branch_alone(project: Config, hub: HubServer) -> None:
    with pytest.raises(PublishError, match="--create-pr needs an existing repo"):
        _publish(project, hub, create_pr=True)
    _publish(project, hub)
    v1_before = hub.state.repo("kernel", REPO).branches["v1"]
    variant = project.build_dir / host_variant_name()
    (variant / "extra.py").write_text("EXTRA = 2\n")
    write_metadata(variant, ident="_ggml_attn_kernels_cuda_fx00001", backend="cuda", archs=["8.0", "9.0"])
    assert verify_build(project, options=NO_VENDOR).ok
    result = _publish(project, hub, create_pr=True, batch_size=1)
    repo = hub.state.repo("kernel", REPO)
    assert repo.branches["v1"] == v1_before
    assert result.pull_requests and "/discussions/" in result.pull_requests[0]
    pr = repo.prs[0]
    assert f"build/{variant.name}/extra.py" in repo.commits[repo.branches[pr]].files
    assert result.verified["ok"]


def test_stale_files_deleted_only_inside_reuploaded_variants(tmp_path: Path, hub: HubServer) -> None:
    root = write_project(tmp_path / "p", hub_repo=REPO)
    cfg = config.load(root)
    a = make_variant(root / "build" / NAME)
    b = make_variant(root / "build" / NAME, variant="torch213-cxx11-cu130-x86_64-linux", uid="fxb")
    (a / "old_helper.py").write_text("OLD = 1\n")
    write_metadata(a, ident="_ggml_attn_kernels_cuda_fx00001", backend="cuda", archs=["8.0", "9.0"])
    assert verify_build(cfg, options=NO_VENDOR).ok
    _publish(cfg, hub)
    (a / "old_helper.py").unlink()
    write_metadata(a, ident="_ggml_attn_kernels_cuda_fx00001", backend="cuda", archs=["8.0", "9.0"])
    import shutil

    shutil.rmtree(b)  # this machine only rebuilt A; B stays as published by another builder
    assert verify_build(cfg, options=NO_VENDOR).ok
    result = _publish(cfg, hub)
    assert [x.path for x in result.plan.branches[0].of(DELETE)] == [f"build/{a.name}/old_helper.py"]
    files = hub.state.history("kernel", REPO, "v1")[0].files
    assert f"build/{a.name}/old_helper.py" not in files
    assert any(p.startswith(f"build/{b.name}/") for p in files)


# --- git transport -----------------------------------------------------------------------------------------


def test_git_transport_to_a_bare_repository(project: Config, tmp_path: Path) -> None:
    from toolkit.publish.git import git_lfs_available

    ok, why = git_lfs_available()
    if not ok:
        pytest.skip(f"git transport needs git-lfs: {why}")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    dry = _publish_git(project, str(remote), dry_run=True)
    assert (
        dry.status == "dry-run"
        and subprocess.run(["git", "-C", str(remote), "branch"], capture_output=True, text=True).stdout == ""
    )
    result = _publish_git(project, str(remote))
    assert result.status == "published" and result.verified["ok"] and result.verified["files_checked"] == 7
    variant = host_variant_name()
    so = f"build/{variant}/_ggml_attn_kernels_cuda_fx00001.abi3.so"
    blob = subprocess.run(["git", "-C", str(remote), "show", f"v1:{so}"], capture_output=True).stdout
    assert blob.startswith(b"version https://git-lfs.github.com/spec/v1"), "binary must be an LFS pointer in git"
    assert list((remote / "lfs" / "objects").rglob("*")), "the LFS object must be in the remote's store"
    attrs = subprocess.run(
        ["git", "-C", str(remote), "show", "v1:.gitattributes"], capture_output=True, text=True
    ).stdout
    assert "*.so filter=lfs" in attrs and "*.metallib filter=lfs" in attrs and "*.dylib filter=lfs" in attrs
    readme = subprocess.run(["git", "-C", str(remote), "show", "main:README.md"], capture_output=True, text=True).stdout
    assert "library_name: kernels" in readme
    again = _publish_git(project, str(remote))
    assert again.status == "up-to-date" and again.commits == ()


def test_git_transport_refuses_a_remote_that_moved_since_the_plan(project: Config, tmp_path: Path) -> None:
    from toolkit import publish
    from toolkit.publish.git import git_lfs_available

    ok, why = git_lfs_available()
    if not ok:
        pytest.skip(f"git transport needs git-lfs: {why}")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    plan = publish.plan(project, publish.Request(to=str(remote), check_vendor=False))
    # someone else creates main after the plan was made against an empty remote
    other = tmp_path / "other"
    git = ["git", "-C", str(other), "-c", "user.name=o", "-c", "user.email=o@o"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(other)], check=True)
    (other / "NOTES").write_text("theirs\n")
    subprocess.run([*git, "add", "NOTES"], check=True)
    subprocess.run([*git, "commit", "-qm", "theirs"], check=True)
    subprocess.run([*git, "push", "-q", str(remote), "main"], check=True)
    theirs = subprocess.run(["git", "-C", str(remote), "rev-parse", "main"], capture_output=True, text=True).stdout
    with pytest.raises(PublishError, match="moved on .* since the plan"):
        publish.execute(plan)
    after = subprocess.run(["git", "-C", str(remote), "branch"], capture_output=True, text=True).stdout.split()
    assert after == ["main"]  # no v1 pushed
    assert (
        subprocess.run(["git", "-C", str(remote), "rev-parse", "main"], capture_output=True, text=True).stdout == theirs
    )


def test_a_hub_client_too_old_for_kernel_repos_is_refused_in_one_line() -> None:
    """huggingface_hub < 2.3 refuses repo_type="kernel" in create_commit deep inside a push (seen with 1.33 on a
    GPU image): publish names the version and the fix before anything is pushed."""
    from toolkit.core.errors import PublishError
    from toolkit.publish.hub import check_hub_version

    with pytest.raises(PublishError) as exc:
        check_hub_version("1.33.0")
    assert "1.33.0" in exc.value.one_line() and ">= 2.3.0" in exc.value.one_line()
    check_hub_version("2.3.0")  # the floor itself passes


def test_publish_collect_and_the_local_hub_have_no_function_over_60_lines() -> None:
    import ast

    import toolkit

    base = Path(toolkit.__file__).parent
    files = [
        *sorted((base / "publish").glob("*.py")),
        base / "ci" / "collect.py",
        *sorted((base / "testing").glob("*.py")),
    ]
    long = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and (node.end_lineno or 0) - node.lineno + 1 > 60
            ):
                long.append(f"{f.relative_to(base)}:{node.name} ({(node.end_lineno or 0) - node.lineno + 1} lines)")
    assert long == []
