"""Publish to a git remote (`--to URL|PATH`) with git-lfs: the same layout as the HTTP transport (variants on
branch v<N>, the card on main), binaries routed through LFS by .gitattributes, then a fresh clone that
proves every file arrives with the right bytes."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.core.errors import PublishError
from toolkit.core.hashing import sha256_file
from toolkit.publish.hub import REPORT_NAME, PublishResult, write_report
from toolkit.publish.plan import ADD, DELETE, RemoteFile, plan_publish
from toolkit.publish.preflight import preflight
from toolkit.verify.binaries import BINARY_SUFFIXES, LFS_POINTER_PREFIX, check_gitattributes, gitattributes_text


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


def publish_git(
    cfg: Any,
    names: list[str] | None = None,
    *,
    remote: str,
    dry_run: bool = False,
    report_path: Path | None = None,
    check_vendor: bool = True,
    progress: Callable[[str], None] | None = None,
) -> PublishResult:
    progress = progress or (lambda _m: None)
    ok, why = git_lfs_available()
    if not ok:
        raise PublishError(f"cannot publish with git: {why}", "install git-lfs, or publish over HTTP (drop --to)")
    ready = preflight(cfg, names, check_vendor=check_vendor)
    names_ = [d.name for d in ready.variant_dirs]
    branch = f"v{ready.version}"
    report_path = report_path or (ready.variant_dirs[0].parent / REPORT_NAME)
    with tempfile.TemporaryDirectory(prefix="ggml-vendor-git-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        git = _Git(work)
        git("init", "-q")
        git("lfs", "install", "--local")
        git("remote", "add", "origin", remote)
        progress(f"fetching {remote}")
        git("fetch", "-q", "origin")
        tree_b = _remote_tree(git, f"origin/{branch}")
        tree_m = _remote_tree(git, "origin/main")
        plan = plan_publish(cfg, ready, repo_id=remote, target=remote, remote_branch=tree_b, remote_main=tree_m)
        if dry_run:
            return PublishResult("dry-run", plan, remote, conformance=ready.conformance)
        commits: list[str] = []
        for bp in plan.branches:
            start = (
                f"origin/{bp.branch}"
                if bp.exists
                else ("origin/main" if tree_m is not None and bp.branch != "main" else None)
            )
            if start:
                git("checkout", "-q", "-B", bp.branch, start)
            else:
                git("checkout", "-q", "--orphan", bp.branch)
                git("rm", "-rfq", "--cached", ".", check=False)
                git("clean", "-fdxq")  # files of the branch handled before must not leak into this one
            attrs_path = work / ".gitattributes"
            old_attrs = attrs_path.read_text() if attrs_path.exists() else None
            new_attrs = gitattributes_text(old_attrs)
            if bp.branch != "main" or old_attrs is not None:
                bad = check_gitattributes(new_attrs)
                if any(f.failed for f in bad):
                    raise PublishError(bad[0].message, bad[0].remedy)
                if new_attrs != old_attrs:
                    attrs_path.write_text(new_attrs)
                    git("add", ".gitattributes")
            for a in bp.actions:
                dest = work / a.path
                if a.action == DELETE:
                    git("rm", "-q", "--cached", "--ignore-unmatch", a.path)
                    if dest.exists():
                        dest.unlink()
                elif a.action == ADD:
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    f = plan.local[a.path]
                    if f.local:
                        shutil.copyfile(f.local, dest)
                    else:
                        dest.write_text(plan.card_text)
                    git("add", a.path)
            # Every binary must enter git as an LFS pointer: a plain blob would be rejected by the Hub.
            for a in bp.actions:
                if a.action == ADD and a.path.endswith(tuple(BINARY_SUFFIXES)):
                    if not git.cat(f":{a.path}").startswith(LFS_POINTER_PREFIX):
                        raise PublishError(
                            f"{a.path} would be committed as a plain git blob, not through LFS",
                            "check that git-lfs is installed and .gitattributes covers it",
                        )
            staged = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=work, env=git.env).returncode != 0
            if staged:
                progress(f"{bp.branch}: committing {len(bp.changes)} changes")
                msg = (
                    f"Upload {', '.join(names_)} with ggml-vendor {__version__}"
                    if bp.branch != "main"
                    else f"Update the kernel card (ggml-vendor {__version__})"
                )
                git("commit", "-q", "-m", msg)
                commits.append(git("rev-parse", "HEAD").strip())
                progress(f"{bp.branch}: pushing (git-lfs uploads the binaries)")
                git("push", "-q", "origin", f"HEAD:refs/heads/{bp.branch}")
        progress("cloning the remote afresh to verify")
        verified = _verify_clone(remote, plan, Path(tmp) / "verify")
    status = "published" if commits else "up-to-date"
    result = PublishResult(status, plan, remote, tuple(commits), (), verified, conformance=ready.conformance)
    result = dataclasses.replace(result, report_path=write_report(report_path, result))
    if not verified["ok"]:
        raise PublishError(
            "the push did not verify: " + "; ".join(verified["mismatches"][:3]),
            f"see {report_path}; re-run publish to repair",
        )
    return result


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
