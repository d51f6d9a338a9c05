"""Publish to a git remote (`--to URL|PATH`) with git-lfs: the same layout as the HTTP transport (variants on
branch v<N>, the card on main), binaries routed through LFS by .gitattributes, then a fresh clone that
proves every file arrives with the right bytes."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.core.config import Config
from toolkit.core.errors import PublishError
from toolkit.core.hashing import sha256_file
from toolkit.core.stage import Log
from toolkit.publish.diff import ADD, DELETE, BranchPlan, PublishPlan, RemoteFile, plan_publish
from toolkit.publish.preflight import preflight
from toolkit.publish.stage import REPORT_NAME, Plan, PublishResult, Request, finish
from toolkit.verify import BINARY_SUFFIXES, LFS_POINTER_PREFIX, check_gitattributes, gitattributes_text


def git_lfs_available() -> tuple[bool, str]:
    if shutil.which("git") is None:
        return False, "git is not installed"
    try:
        proc = subprocess.run(["git", "lfs", "version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"git lfs cannot run: {exc}"
    if proc.returncode != 0:
        return False, "git-lfs is not installed (apt-get install git-lfs, or see https://git-lfs.com)"
    return True, proc.stdout.strip()


class _Git:
    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        # Deterministic and non-interactive; the identity is only a fallback for machines without one.
        self.env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_LFS_SKIP_SMUDGE": "1"}
        self.env.setdefault("GIT_AUTHOR_NAME", "ggml-vendor")
        self.env.setdefault("GIT_AUTHOR_EMAIL", "ggml-vendor@localhost")
        self.env.setdefault("GIT_COMMITTER_NAME", self.env["GIT_AUTHOR_NAME"])
        self.env.setdefault("GIT_COMMITTER_EMAIL", self.env["GIT_AUTHOR_EMAIL"])

    def __call__(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=self.cwd, capture_output=True, text=True, env={**self.env, **(env or {})}
        )
        if check and proc.returncode != 0:
            tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["(no output)"]
            raise PublishError(f"git {args[0]} failed: {tail[0]}", "check the remote URL and your access to it")
        return proc.stdout

    def cat(self, rev_path: str) -> bytes:
        return subprocess.run(
            ["git", "cat-file", "-p", rev_path], cwd=self.cwd, capture_output=True, env=self.env
        ).stdout


def _parse_pointer(data: bytes) -> tuple[str, int] | None:
    if not data.startswith(LFS_POINTER_PREFIX):
        return None
    fields = dict(line.split(" ", 1) for line in data.decode(errors="replace").splitlines() if " " in line)
    oid = fields.get("oid", "")
    return (oid.split(":", 1)[1], int(fields.get("size", "0"))) if oid.startswith("sha256:") else None


def _remote_tree(git: _Git, ref: str) -> dict[str, RemoteFile] | None:
    """Files on a remote-tracking ref, LFS pointers resolved to the sha256/size they stand for."""
    if not git("rev-parse", "--verify", "--quiet", ref, check=False).strip():
        return None
    out: dict[str, RemoteFile] = {}
    for line in git("ls-tree", "-r", "-l", ref).splitlines():
        meta, path = line.split("\t", 1)
        _mode, kind, blob, size = meta.split()
        if kind != "blob":
            continue
        sha, real = None, int(size)
        if int(size) < 1024:
            ptr = _parse_pointer(git.cat(blob))
            if ptr:
                sha, real = ptr
        if sha is None:
            out[path] = RemoteFile(path, real, blob, None)  # a plain blob: compared by git blob id
        else:
            out[path] = RemoteFile(path, real, blob, sha)
    return out


def _fetched(work: Path, remote: str, log: Log) -> _Git:
    """A scratch repository (outside the project) holding the remote's branches as origin/*."""
    work.mkdir(parents=True)
    git = _Git(work)
    git("init", "-q")
    git("lfs", "install", "--local")
    git("remote", "add", "origin", remote)
    log(f"fetching {remote}")
    git("fetch", "-q", "origin")
    return git


def _heads(git: _Git) -> dict[str, str]:
    out = git("for-each-ref", "--format=%(refname:strip=3) %(objectname)", "refs/remotes/origin/")
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line and not line.startswith("HEAD "))


def plan_git(cfg: Config, request: Request, log: Log) -> Plan:
    """Preflight build/, fetch the remote into a scratch repository (deleted on return) and diff."""
    ok, why = git_lfs_available()
    if not ok:
        raise PublishError(f"cannot publish with git: {why}", "install git-lfs, or publish over HTTP (drop --to)")
    remote = request.to
    if not remote:  # publish.plan chooses this transport only for a --to remote
        raise PublishError("publishing with git needs a remote", "pass --to URL_OR_PATH")
    ready = preflight(cfg, list(request.variants) or None, check_vendor=request.check_vendor)
    with tempfile.TemporaryDirectory(prefix="ggml-vendor-git-") as tmp:
        git = _fetched(Path(tmp) / "work", remote, log)
        tree_b = _remote_tree(git, f"origin/v{ready.version}")
        tree_m = _remote_tree(git, "origin/main")
        heads = _heads(git)
    files = plan_publish(cfg, ready, repo_id=remote, target=remote, remote_branch=tree_b, remote_main=tree_m)
    report = request.report or (ready.variant_dirs[0].parent / REPORT_NAME)
    return Plan("git", request, ready, files, remote, report, repo_exists=True, heads=heads)


def _start_branch(git: _Git, bp: BranchPlan, plan: Plan) -> None:
    """Check out where the plan's diff started: the branch as it was, a new branch from main, or nothing."""
    if bp.exists:
        git("checkout", "-q", "-B", bp.branch, plan.heads[bp.branch])
    elif bp.branch != "main" and "main" in plan.heads:
        git("checkout", "-q", "-B", bp.branch, plan.heads["main"])
    else:
        git("checkout", "-q", "--orphan", bp.branch)
        git("rm", "-rfq", "--cached", ".", check=False)
        git("clean", "-fdxq")  # files of the branch handled before must not leak into this one


def _write_gitattributes(git: _Git, bp: BranchPlan) -> None:
    """Route every binary through LFS (.gitattributes), refusing one that would not."""
    attrs_path = git.cwd / ".gitattributes"
    old_attrs = attrs_path.read_text() if attrs_path.exists() else None
    new_attrs = gitattributes_text(old_attrs)
    if bp.branch == "main" and old_attrs is None:
        return
    bad = check_gitattributes(new_attrs)
    if any(f.failed for f in bad):
        raise PublishError(bad[0].message, bad[0].remedy)
    if new_attrs != old_attrs:
        attrs_path.write_text(new_attrs)
        git("add", ".gitattributes")


def _stage_actions(git: _Git, bp: BranchPlan, files: PublishPlan) -> None:
    for a in bp.actions:
        dest = git.cwd / a.path
        if a.action == DELETE:
            git("rm", "-q", "--cached", "--ignore-unmatch", a.path)
            if dest.exists():
                dest.unlink()
        elif a.action == ADD:
            dest.parent.mkdir(parents=True, exist_ok=True)
            f = files.local[a.path]
            if f.local:
                shutil.copyfile(f.local, dest)
            else:
                dest.write_text(files.card_text)
            git("add", a.path)
    # Every binary must enter git as an LFS pointer: a plain blob would be rejected by the Hub.
    for a in bp.actions:
        if a.action == ADD and a.path.endswith(tuple(BINARY_SUFFIXES)):
            if not git.cat(f":{a.path}").startswith(LFS_POINTER_PREFIX):
                raise PublishError(
                    f"{a.path} would be committed as a plain git blob, not through LFS",
                    "check that git-lfs is installed and .gitattributes covers it",
                )


def _commit_and_push(git: _Git, bp: BranchPlan, plan: Plan, log: Log) -> str | None:
    """Commit what is staged and push it; the push is refused by the remote (non-fast-forward) when the
    branch moved since the plan, so nothing is overwritten."""
    if subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=git.cwd, env=git.env).returncode == 0:
        return None
    log(f"{bp.branch}: committing {len(bp.changes)} changes")
    msg = (
        f"Upload {', '.join(plan.files.variants)} with ggml-vendor {__version__}"
        if bp.branch != "main"
        else f"Update the kernel card (ggml-vendor {__version__})"
    )
    git("commit", "-q", "-m", msg)
    oid = git("rev-parse", "HEAD").strip()
    log(f"{bp.branch}: pushing (git-lfs uploads the binaries)")
    lease = f"--force-with-lease=refs/heads/{bp.branch}:{plan.heads.get(bp.branch, '')}"
    git("push", "-q", lease, "origin", f"HEAD:refs/heads/{bp.branch}")
    return oid


def execute_git(plan: Plan, log: Log) -> PublishResult:
    """Commit and push each branch of the plan on top of the head it was planned against, then clone afresh
    and compare every published file's bytes."""
    commits: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ggml-vendor-git-") as tmp:
        git = _fetched(Path(tmp) / "work", plan.target, log)
        now = _heads(git)
        moved = sorted(b.branch for b in plan.files.branches if now.get(b.branch) != plan.heads.get(b.branch))
        if moved:
            raise PublishError(
                f"{', '.join(moved)} moved on {plan.target} since the plan (someone else pushed)",
                "re-run ggml-vendor publish: it re-plans against the live tree and resumes",
            )
        for bp in plan.files.branches:
            _start_branch(git, bp, plan)
            _write_gitattributes(git, bp)
            _stage_actions(git, bp, plan.files)
            oid = _commit_and_push(git, bp, plan, log)
            commits += [oid] if oid else []
        log("cloning the remote afresh to verify")
        verified = _verify_clone(plan.target, plan.files, Path(tmp) / "verify")
    return finish(plan, tuple(commits), (), verified)


def _verify_clone(remote: str, plan: Any, dest: Path) -> dict[str, Any]:
    """Clone each branch with LFS smudging on and compare every published file's bytes."""
    mismatches: list[str] = []
    checked = 0
    for bp in plan.branches:
        d = dest / bp.branch
        d.mkdir(parents=True)
        git = _Git(d)
        smudge = {"GIT_LFS_SKIP_SMUDGE": "0"}
        git("init", "-q")
        git("lfs", "install", "--local")
        git("remote", "add", "origin", remote)
        git("fetch", "-q", "origin", bp.branch)
        git("checkout", "-q", "-B", bp.branch, "FETCH_HEAD", env=smudge)
        for a in bp.actions:
            p = d / a.path
            if a.action == DELETE:
                if p.exists():
                    mismatches.append(f"{bp.branch}:{a.path} should have been deleted")
                continue
            checked += 1
            local = plan.local[a.path]
            if not p.is_file():
                mismatches.append(f"{bp.branch}:{a.path} is missing after the push")
            elif sha256_file(p) != local.sha256:
                mismatches.append(f"{bp.branch}:{a.path} differs after the push")
    return {"ok": not mismatches, "files_checked": checked, "mismatches": mismatches}
