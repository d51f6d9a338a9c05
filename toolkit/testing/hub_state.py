"""The local test Hub's state: its repositories, commits, branches and blobs in memory (what tests inspect),
with the git-ish model the endpoints share (resolving a revision, applying a commit's operations, listing a
tree). Apart from the HTTP handlers (hub_repos.py, hub_files.py) that serve it."""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from toolkit.core.hashing import git_blob_id
from toolkit.verify.binaries import BINARY_SUFFIXES

LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"
LFS_SUFFIXES = (*BINARY_SUFFIXES, ".bin", ".safetensors")
LFS_MIN_SIZE = 10 * 1024 * 1024
TYPE_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/", "kernel": "kernels/"}
PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space", "kernels": "kernel"}


@dataclass(frozen=True)
class FileEntry:
    size: int
    blob_id: str  # git blob id (of the pointer for LFS files)
    sha256: str | None  # LFS oid; None for a regular git blob
    content_key: str  # key into HubState.blobs (regular) or HubState.lfs (LFS)
    last_commit: str = ""


@dataclass
class Commit:
    oid: str
    parent: str | None
    files: dict[str, FileEntry]
    title: str
    date: str


@dataclass
class Repo:
    type: str
    id: str
    private: bool = False
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit oid; PRs as refs/pr/N
    commits: dict[str, Commit] = field(default_factory=dict)
    prs: list[str] = field(default_factory=list)


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class HubState:
    """Everything the server holds; tests inspect it directly (commits, refs, LFS objects, request log)."""

    def __init__(self, tokens: tuple[str, ...] = ("hf_test_token",), trusted_orgs: tuple[str, ...] = ()) -> None:
        self.lock = threading.RLock()
        self.repos: dict[tuple[str, str], Repo] = {}
        self.blobs: dict[str, bytes] = {}
        self.lfs: dict[str, bytes] = {}
        self.tokens = set(tokens)
        self.orgs: dict[str, bool] = {o: True for o in trusted_orgs}
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, authorization header)
        self.fail_next: dict[str, int] = {}  # endpoint name -> how many upcoming calls answer 500
        self.hooks: list[Callable[[str, str], None]] = []
        self._counter = 0

    # --- helpers used by tests -----------------------------------------------------------------------
    def repo(self, repo_type: str, repo_id: str) -> Repo:
        r = self.repos.get((repo_type, repo_id))
        if r is None:
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return r

    def history(self, repo_type: str, repo_id: str, ref: str) -> list[Commit]:
        r = self.repo(repo_type, repo_id)
        oid: str | None = self.resolve(r, ref)
        out = []
        while oid:
            c = r.commits[oid]
            out.append(c)
            oid = c.parent
        return out

    def read(self, repo_type: str, repo_id: str, ref: str, path: str) -> bytes:
        r = self.repo(repo_type, repo_id)
        entry = r.commits[self.resolve(r, ref)].files[path]
        return self.content(entry)

    def content(self, entry: FileEntry) -> bytes:
        return self.lfs[entry.content_key] if entry.sha256 else self.blobs[entry.content_key]

    # --- git-ish model ---------------------------------------------------------------------------------
    def resolve(self, repo: Repo, rev: str) -> str:
        """A branch name, a full ref (`refs/heads/v1`, what `kernels versions` asks for; `refs/pr/N`) or a
        commit oid, as the Hub accepts them."""
        if rev.startswith("refs/heads/"):
            rev = rev.removeprefix("refs/heads/")
        if rev in repo.branches:
            return repo.branches[rev]
        if rev in repo.commits:
            return rev
        raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")

    def new_commit(self, repo: Repo, parent: str | None, files: dict[str, FileEntry], title: str) -> Commit:
        self._counter += 1
        seed = f"{repo.id}\0{parent}\0{title}\0{self._counter}\0{sorted((p, e.blob_id) for p, e in files.items())}"
        oid = hashlib.sha1(seed.encode()).hexdigest()
        date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        c = Commit(oid, parent, files, title, date)
        repo.commits[oid] = c
        return c


def apply_operations(st: HubState, files: dict[str, FileEntry], ops: list[dict[str, Any]]) -> dict[str, FileEntry]:
    """A commit's ndjson operations applied to a copy of the parent's files, with the Hub's refusals."""
    for op in ops:
        key, v = op["key"], op.get("value", {})
        if key == "file":
            data = base64.b64decode(v["content"])
            bid = git_blob_id(data)
            st.blobs[bid] = data
            files[v["path"]] = FileEntry(len(data), bid, None, bid)
        elif key == "lfsFile":
            oid = v["oid"]
            if oid not in st.lfs:
                raise HubError(422, f"LFS object {oid} for {v['path']} was never uploaded")
            size = len(st.lfs[oid])
            pointer = LFS_POINTER.format(oid=oid, size=size).encode()
            files[v["path"]] = FileEntry(size, git_blob_id(pointer), oid, oid)
        elif key == "deletedFile":
            if v["path"] not in files:
                raise HubError(404, f"A file with this name doesn't exist: {v['path']}", "EntryNotFound")
            del files[v["path"]]
        elif key == "deletedFolder":
            prefix = v["path"].rstrip("/") + "/"
            for p in [p for p in files if p.startswith(prefix)]:
                del files[p]
    return files


def listed_files(commit: Commit, prefix: str) -> tuple[str, dict[str, FileEntry]]:
    """The files under `prefix` (a directory, or one file) of `commit`, and the prefix their paths start with."""
    base = prefix + "/" if prefix else ""
    files = {p: e for p, e in commit.files.items() if p.startswith(base)}
    if not prefix or files:
        return base, files
    if prefix in commit.files:
        return "", {prefix: commit.files[prefix]}
    raise HubError(404, f"{prefix} does not exist on {commit.oid}", "EntryNotFound")


def parent_dirs(base: str, parts: list[str], recursive: bool) -> list[str]:
    """The directory entries a file's path adds to a tree listing: every parent when recursive, else the first."""
    dirs = [base + "/".join(parts[:i]) for i in range(1, len(parts))]
    return dirs if recursive else dirs[:1]


def file_entry(path: str, e: FileEntry, repo: Repo | None) -> dict[str, Any]:
    """One file of a tree listing; with `repo` (expand=true) its last commit too."""
    doc: dict[str, Any] = {"type": "file", "oid": e.blob_id, "size": e.size, "path": path}
    if e.sha256:
        pointer = LFS_POINTER.format(oid=e.sha256, size=e.size)
        doc["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": len(pointer)}
    lc = repo.commits.get(e.last_commit) if repo is not None else None
    if lc is not None:
        doc["lastCommit"] = {"id": lc.oid, "title": lc.title, "date": lc.date}
    return doc
