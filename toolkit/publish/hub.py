"""Publish over the Hub's HTTP API with huggingface_hub: a kernel-type repo, the variants to branch v<N>, the
card to main, commits in batches guarded by `parent_commit`, then a re-listing that proves every file
arrived with the right size and hash. Re-running after an interruption resumes from the live tree."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.core.errors import PublishError
from toolkit.publish.plan import (
    ADD,
    DELETE,
    BranchPlan,
    PublishPlan,
    RemoteFile,
    batches,
    plan_publish,
    same_content,
)
from toolkit.publish.preflight import preflight, resolve_token
from toolkit.verify.binaries import BINARY_SUFFIXES

REPO_TYPE = "kernel"
# huggingface_hub learnt to commit to kernel-type repos in 2.3.0 (older releases refuse repo_type="kernel" in
# create_commit with "Invalid repo type"): pyproject.toml pins the floor, this names it when an older one is found.
MIN_HUB = (2, 3, 0)
BATCH_SIZE = 1000  # operations per commit, as kernel-builder's upload does
REPORT_NAME = "publish-report.json"


@dataclass(frozen=True)
class PublishResult:
    status: str  # "dry-run", "published" or "up-to-date"
    plan: PublishPlan
    target: str
    commits: tuple[str, ...] = ()
    pull_requests: tuple[str, ...] = ()
    verified: dict[str, Any] = field(default_factory=dict)
    report_path: str = ""
    conformance: dict[str, str] = field(default_factory=dict)  # variant -> "passed: ..." / "not run (why)"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "conformance": dict(self.conformance),
            "target": self.target,
            "tool_version": __version__,
            "plan": self.plan.to_json(),
            "commits": list(self.commits),
            "pull_requests": list(self.pull_requests),
            "verified": self.verified,
        }


@contextlib.contextmanager
def lfs_only(enabled: bool) -> Iterator[None]:
    """Make huggingface_hub use the plain LFS upload path instead of Xet (for hubs that do not speak Xet)."""
    from huggingface_hub import constants

    old = constants.HF_HUB_DISABLE_XET
    if enabled:
        constants.HF_HUB_DISABLE_XET = True
    try:
        yield
    finally:
        constants.HF_HUB_DISABLE_XET = old


def _is_official(endpoint: str | None) -> bool:
    return endpoint is None or endpoint.rstrip("/").endswith("huggingface.co")


def _fail(exc: Exception, token: str, what: str) -> PublishError:
    """An HTTP failure as one actionable line; the token never appears, even if a server echoed it."""
    status = getattr(getattr(exc, "response", None), "status_code", None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = text.replace(token, "***") if token else text
    if status == 401:
        return PublishError(f"{what}: the Hub rejected the token (401)", "check HF_TOKEN / `hf auth login`")
    if status == 403:
        return PublishError(
            f"{what}: forbidden (403): {text}",
            "kernel repos need kernel-creation access for the owner (account settings: "
            "'Request Kernels Creation') and a write token",
        )
    if status == 412:
        return PublishError(
            f"{what}: the branch moved while publishing (someone else pushed)",
            "re-run ggml-vendor publish: it re-plans against the live tree and resumes",
        )
    return PublishError(f"{what}: {text}", "re-run ggml-vendor publish: it resumes from the live tree")


def _tree(api: Any, repo_id: str, rev: str) -> dict[str, RemoteFile]:
    from huggingface_hub.hf_api import RepoFile

    return {
        e.path: RemoteFile(e.path, e.size, e.blob_id, e.lfs.sha256 if e.lfs else None)
        for e in api.list_repo_tree(repo_id, repo_type=REPO_TYPE, revision=rev, recursive=True)
        if isinstance(e, RepoFile)
    }


def _live_state(api: Any, repo_id: str, branch: str) -> tuple[bool, dict[str, str], dict | None, dict | None]:
    """(repo exists, branch heads, tree of `branch` or None, tree of main or None)."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
    except RepositoryNotFoundError:
        return False, {}, None, None
    heads = {b.name: b.target_commit for b in refs.branches}
    tree_b = _tree(api, repo_id, heads[branch]) if branch in heads else None
    tree_m = _tree(api, repo_id, heads["main"]) if "main" in heads else None
    return True, heads, tree_b, tree_m


def _operations(plan: PublishPlan, chunk: tuple) -> list:
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    ops: list[CommitOperationAdd | CommitOperationDelete] = []
    for a in chunk:
        if a.action == ADD:
            f = plan.local[a.path]
            src: Any = f.local or plan.card_text.encode()  # no file on disk = the generated card
            ops.append(CommitOperationAdd(path_in_repo=a.path, path_or_fileobj=src))
        elif a.action == DELETE:
            ops.append(CommitOperationDelete(path_in_repo=a.path))
    return ops


def _push_branch(
    api: Any,
    repo_id: str,
    bp: BranchPlan,
    plan: PublishPlan,
    head: str,
    *,
    create_pr: bool,
    batch_size: int,
    progress: Callable[[str], None],
) -> tuple[list[str], list[str], str]:
    """Commit one branch's changes in batches; returns (commit oids, PR urls, revision holding the result)."""
    commits: list[str] = []
    prs: list[str] = []
    revision = bp.branch
    chunks = batches(bp.actions, batch_size)
    for i, chunk in enumerate(chunks):
        msg = (
            f"Upload {', '.join(plan.variants)} with ggml-vendor {__version__}"
            if bp.branch != "main"
            else f"Update the kernel card (ggml-vendor {__version__})"
        )
        if len(chunks) > 1:
            msg += f" (batch {i + 1}/{len(chunks)})"
        progress(f"{bp.branch}: commit {i + 1}/{len(chunks)} ({len(chunk)} changes)")
        first_pr = create_pr and not prs
        info = api.create_commit(
            repo_id,
            _operations(plan, chunk),
            commit_message=msg,
            repo_type=REPO_TYPE,
            revision=revision,
            parent_commit=head,
            create_pr=first_pr or None,
        )
        if first_pr:
            prs.append(info.pr_url)
            revision = info.pr_revision or revision
        head = info.oid
        commits.append(info.oid)
    return commits, prs, revision


def _verify_after(api: Any, repo_id: str, plan: PublishPlan, revisions: dict[str, str]) -> dict[str, Any]:
    """Re-list each pushed branch and compare sizes and hashes with what we meant to publish."""
    mismatches: list[str] = []
    checked = 0
    for bp in plan.branches:
        rev = revisions.get(bp.branch)
        if rev is None:
            continue
        tree = _tree(api, repo_id, rev)
        for a in bp.actions:
            r = tree.get(a.path)
            if a.action == DELETE:
                if r is not None:
                    mismatches.append(f"{bp.branch}:{a.path} should have been deleted")
                continue
            checked += 1
            local = plan.local[a.path]
            if r is None:
                mismatches.append(f"{bp.branch}:{a.path} is missing after the push")
            elif r.size != local.size or not same_content(local, r):
                mismatches.append(f"{bp.branch}:{a.path} differs after the push (size {r.size} vs {local.size})")
            elif local.path_in_repo.endswith(tuple(BINARY_SUFFIXES)) and not r.sha256:
                mismatches.append(f"{bp.branch}:{a.path} was stored as a plain git blob, not LFS")
    return {"ok": not mismatches, "files_checked": checked, "mismatches": mismatches, "revisions": revisions}


def write_report(path: Path, result: PublishResult) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return str(path)


def check_hub_version(version: str | None = None) -> None:
    """Refuse, in one line, a huggingface_hub too old to commit to a kernel repo (before anything is pushed)."""
    import huggingface_hub
    from packaging.version import Version

    found = version or huggingface_hub.__version__
    if Version(found).release[:3] < MIN_HUB:
        need = ".".join(map(str, MIN_HUB))
        raise PublishError(
            f"huggingface_hub {found} cannot commit to kernel repos (needs >= {need})",
            f"pip install 'huggingface_hub>={need}'",
        )


def publish_hub(
    cfg: Any,
    names: list[str] | None = None,
    *,
    repo_id: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    create_pr: bool = False,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    report_path: Path | None = None,
    check_vendor: bool = True,
    progress: Callable[[str], None] | None = None,
) -> PublishResult:
    """Plan against the live repo and (unless dry_run) push; see the module docstring."""
    check_hub_version()
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    progress = progress or (lambda _msg: None)
    repo_id = repo_id or cfg.hub_repo
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    ready = preflight(cfg, names, check_vendor=check_vendor, official_hub=_is_official(endpoint))
    secret = resolve_token(token) if not dry_run else (token or os.environ.get("HF_TOKEN") or "")
    target = f"{(endpoint or 'https://huggingface.co').rstrip('/')}/kernels/{repo_id}"
    report_path = report_path or (ready.variant_dirs[0].parent / REPORT_NAME)
    api = HfApi(endpoint=endpoint, token=secret or None, library_name="ggml-vendor", library_version=__version__)
    branch = f"v{ready.version}"
    with lfs_only(not _is_official(endpoint)):
        try:
            progress("reading the live repository")
            exists, heads, tree_b, tree_m = _live_state(api, repo_id, branch)
            plan = plan_publish(cfg, ready, repo_id=repo_id, target=target, remote_branch=tree_b, remote_main=tree_m)
            if dry_run:
                return PublishResult("dry-run", plan, target, conformance=ready.conformance)
            if create_pr and (not exists or branch not in heads):
                raise PublishError(
                    f"--create-pr needs an existing repo with branch {branch}",
                    "publish once without --create-pr (needs write access), then open PRs",
                )
            if not exists:
                progress(f"creating kernel repo {repo_id}")
                api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=True)
                exists, heads, tree_b, tree_m = _live_state(api, repo_id, branch)
            if branch not in heads:
                # Created from main, so it starts with main's tree: the plan (made against main's tree for
                # a missing branch) already prunes whatever build/ files it inherits.
                progress(f"creating branch {branch} from main")
                api.create_branch(
                    repo_id, branch=branch, repo_type=REPO_TYPE, revision=heads.get("main"), exist_ok=True
                )
                heads = _live_state(api, repo_id, branch)[1]
            commits: list[str] = []
            prs: list[str] = []
            revisions: dict[str, str] = {}
            for bp in plan.branches:
                c, p, rev = _push_branch(
                    api,
                    repo_id,
                    bp,
                    plan,
                    heads[bp.branch],
                    create_pr=create_pr,
                    batch_size=batch_size,
                    progress=progress,
                )
                commits += c
                prs += p
                revisions[bp.branch] = c[-1] if c else heads[bp.branch]
            progress("re-listing the repository to verify the upload")
            verified = _verify_after(api, repo_id, plan, revisions)
        except HfHubHTTPError as exc:
            raise _fail(exc, secret, f"publishing to {repo_id} failed") from None
        except OSError as exc:  # connection refused, DNS, ...
            text = str(exc).replace(secret, "***") if secret else str(exc)
            raise PublishError(
                f"cannot reach {endpoint or 'the Hub'}: {text}", "check the network / HF_ENDPOINT"
            ) from None
    status = "up-to-date" if not commits else "published"
    result = PublishResult(status, plan, target, tuple(commits), tuple(prs), verified, conformance=ready.conformance)
    result = dataclasses.replace(result, report_path=write_report(report_path, result))
    if not verified["ok"]:
        raise PublishError(
            "the upload did not verify: " + "; ".join(verified["mismatches"][:3]),
            f"see {report_path}; re-run publish to repair",
        )
    return result
