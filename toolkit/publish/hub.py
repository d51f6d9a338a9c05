"""Publish over the Hub's HTTP API with huggingface_hub: a kernel-type repo, the variants to branch v<N>, the
card to main, commits in batches guarded by `parent_commit`, then a re-listing that proves every file
arrived with the right size and hash. Re-running after an interruption resumes from the live tree."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from toolkit import __version__
from toolkit.core.config import Config
from toolkit.core.errors import PublishError
from toolkit.core.stage import Log
from toolkit.publish.diff import ADD, DELETE, FileAction, PublishPlan, RemoteFile, plan_publish, same_content
from toolkit.publish.preflight import preflight, resolve_token
from toolkit.publish.stage import REPORT_NAME, Plan, PublishResult, Request, finish
from toolkit.verify import BINARY_SUFFIXES

REPO_TYPE = "kernel"
# huggingface_hub learnt to commit to kernel-type repos in 2.3.0 (older releases refuse repo_type="kernel" in
# create_commit with "Invalid repo type"): pyproject.toml pins the floor, this names it when an older one is found.
MIN_HUB = (2, 3, 0)
BATCH_SIZE = 1000  # operations per commit, as kernel-builder's upload does


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


def _network_errors() -> tuple[type[Exception], ...]:
    """The exceptions huggingface_hub's HTTP client raises when the Hub cannot be reached at all (refused,
    DNS, timeout, TLS): OSError, and httpx2 for huggingface_hub 2.x or httpx for the releases before it."""
    found: list[type[Exception]] = [OSError]  # connection refused, DNS, timeouts, ... below the HTTP client
    for name in ("httpx2", "httpx"):
        with contextlib.suppress(ImportError):
            found.append(__import__(name).RequestError)
    return tuple(found)


def _tree(api: Any, repo_id: str, rev: str) -> dict[str, RemoteFile]:
    from huggingface_hub.hf_api import RepoFile

    return {
        e.path: RemoteFile(e.path, e.size, e.blob_id, e.lfs.sha256 if e.lfs else None)
        for e in api.list_repo_tree(repo_id, repo_type=REPO_TYPE, revision=rev, recursive=True)
        if isinstance(e, RepoFile)
    }


def _live_state(
    api: Any, repo_id: str, branch: str
) -> tuple[bool, dict[str, str], dict[str, RemoteFile] | None, dict[str, RemoteFile] | None]:
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


def _live_trees(api: Any, repo_id: str, branches: list[str]) -> dict[str, dict[str, RemoteFile] | None]:
    """branch -> its tree now, or None where the branch (or the repository) does not exist."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        refs = api.list_repo_refs(repo_id, repo_type=REPO_TYPE)
    except RepositoryNotFoundError:
        return dict.fromkeys(branches)
    heads = {b.name: b.target_commit for b in refs.branches}
    return {b: _tree(api, repo_id, heads[b]) if b in heads else None for b in branches}


def _operations(plan: PublishPlan, chunk: tuple[FileAction, ...]) -> list[Any]:
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    ops: list[Any] = []
    for a in chunk:
        if a.action == ADD:
            f = plan.local[a.path]
            src: Any = f.local or plan.card_text.encode()  # no file on disk = the generated card
            ops.append(CommitOperationAdd(path_in_repo=a.path, path_or_fileobj=src))
        elif a.action == DELETE:
            ops.append(CommitOperationDelete(path_in_repo=a.path))
    return ops


def _commit_message(plan: PublishPlan, branch: str, i: int, n: int) -> str:
    msg = (
        f"Upload {', '.join(plan.variants)} with ggml-vendor {__version__}"
        if branch != "main"
        else f"Update the kernel card (ggml-vendor {__version__})"
    )
    return msg + (f" (batch {i + 1}/{n})" if n > 1 else "")


def _push_branch(
    api: Any,
    plan: Plan,
    branch: str,
    chunks: list[tuple[FileAction, ...]],
    head: str,
    log: Log,
) -> tuple[list[str], list[str], str]:
    """Commit the plan's batches for one branch, each on top of the previous (the first on `head`, the
    commit the plan read); returns (commit oids, PR urls, revision holding the result)."""
    commits: list[str] = []
    prs: list[str] = []
    revision = branch
    for i, chunk in enumerate(chunks):
        log(f"{branch}: commit {i + 1}/{len(chunks)} ({len(chunk)} changes)")
        first_pr = plan.request.create_pr and not prs
        info = api.create_commit(
            plan.files.repo_id,
            _operations(plan.files, chunk),
            commit_message=_commit_message(plan.files, branch, i, len(chunks)),
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


def _endpoint(request: Any) -> str | None:
    return request.endpoint or os.environ.get("HF_ENDPOINT") or None


def _api(endpoint: str | None, token: str | None) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token or None, library_name="ggml-vendor", library_version=__version__)


@contextlib.contextmanager
def _talking_to_hub(endpoint: str | None, repo_id: str, secret: str) -> Iterator[None]:
    """Xet off for local hubs; every HTTP or network failure as one PublishError line (exit 9), token masked."""
    from huggingface_hub.errors import HfHubHTTPError

    unreachable: tuple[type[Exception], ...] = (OSError, *_network_errors())
    with lfs_only(not _is_official(endpoint)):
        try:
            yield
        except HfHubHTTPError as exc:
            raise _fail(exc, secret, f"publishing to {repo_id} failed") from None
        except unreachable as exc:  # connection refused, DNS, timeouts, ...
            text = str(exc).replace(secret, "***") if secret else str(exc)
            raise PublishError(
                f"cannot reach {endpoint or 'the Hub'}: {text}", "check the network / HF_ENDPOINT"
            ) from None


def _token_if_any(token: str | None) -> str:
    try:
        return resolve_token(token)
    except PublishError:
        return ""


def plan_hub(cfg: Config, request: Request, log: Log) -> Plan:
    """Preflight build/, read the repository's refs and trees (reads only: no token needed) and diff."""
    check_hub_version()
    if request.repo is not None:  # "" too is a bad --repo, never the configured repo in its place
        from toolkit.core.package_checks import check_repo_id

        check_repo_id(request.repo, "--repo")
    repo_id = request.repo if request.repo is not None else cfg.hub_repo
    endpoint = _endpoint(request)
    ready = preflight(
        cfg, list(request.variants) or None, check_vendor=request.check_vendor, official_hub=_is_official(endpoint)
    )
    target = f"{(endpoint or 'https://huggingface.co').rstrip('/')}/kernels/{repo_id}"
    branch = f"v{ready.version}"
    token = _token_if_any(request.token)  # reads of a private repo need it; a dry run needs none
    with _talking_to_hub(endpoint, repo_id, token):
        log("reading the live repository")
        exists, heads, tree_b, tree_m = _live_state(_api(endpoint, token), repo_id, branch)
    if request.create_pr and branch not in heads:
        raise PublishError(
            f"--create-pr needs an existing repo with branch {branch}",
            "publish once without --create-pr (needs write access), then open PRs",
        )
    files = plan_publish(cfg, ready, repo_id=repo_id, target=target, remote_branch=tree_b, remote_main=tree_m)
    return Plan(
        "hub",
        request,
        ready,
        files,
        target,
        request.report or (ready.variant_dirs[0].parent / REPORT_NAME),
        repo_exists=exists,
        heads=heads,
        batch_size=request.batch_size,
        endpoint=endpoint,
    )


def _ensure_branches(api: Any, plan: Plan, log: Log) -> dict[str, str]:
    """The heads to commit on: the plan's, plus the repo and the version branch where the plan found them
    missing (the branch starts at the main the plan read, so its inherited tree is the one it diffed)."""
    repo_id, branch = plan.files.repo_id, f"v{plan.files.version}"
    heads = dict(plan.heads)
    if not plan.repo_exists:
        log(f"creating kernel repo {repo_id}")
        api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=True)
        heads = _live_state(api, repo_id, branch)[1]
    if branch not in heads:
        log(f"creating branch {branch} from main")
        api.create_branch(repo_id, branch=branch, repo_type=REPO_TYPE, revision=heads.get("main"), exist_ok=True)
        heads[branch] = heads["main"] if "main" in heads else _live_state(api, repo_id, branch)[1][branch]
    return heads


def execute_hub(plan: Plan, log: Log) -> PublishResult:
    """Push the plan's batches over the HTTP API, re-list, write the report."""
    secret = resolve_token(plan.request.token)
    api = _api(plan.endpoint, secret)
    commits: list[str] = []
    prs: list[str] = []
    revisions: dict[str, str] = {}
    with _talking_to_hub(plan.endpoint, plan.files.repo_id, secret):
        heads = _ensure_branches(api, plan, log)
        for branch, chunks in plan.commit_batches.items():
            c, p, rev = _push_branch(api, plan, branch, chunks, heads[branch], log)
            commits += c
            prs += p
            revisions[branch] = c[-1] if c else heads[branch]
        log("re-listing the repository to verify the upload")
        verified = _verify_after(api, plan.files.repo_id, plan.files, revisions)
    return finish(plan, tuple(commits), tuple(prs), verified)
