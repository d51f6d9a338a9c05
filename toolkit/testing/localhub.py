"""A local stand-in for the Hugging Face Hub, used by the tests and by `ggml-vendor demo`: the part of its
HTTP API that huggingface_hub (2.x) and kernels (0.17.2) use to publish and load a kernel, served from
memory on 127.0.0.1.

Spoken: repo creation (any repo type, `kernel` included), repo info, refs, branch creation/deletion, the
commit flow (preupload -> LFS batch -> PUT upload -> verify -> ndjson commit, `parentCommit` guarded,
`create_pr`), tree listing (recursive, expand), paths-info, commit history, file download (`resolve/`,
HEAD and GET), README metadata validation, whoami and organization overview (for kernels' trust check).
Xet is never advertised: clients must run with xet disabled (HF_HUB_DISABLE_XET=1), which makes
huggingface_hub take the plain LFS path.

Writes need `Authorization: Bearer <token>` with a token the server knows; reads are public. Faults can be
injected (`fail_next`) to test interrupted publishes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

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


def _apply_operations(st: HubState, files: dict[str, FileEntry], ops: list[dict]) -> dict[str, FileEntry]:
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


def _listed_files(commit: Commit, prefix: str) -> tuple[str, dict[str, FileEntry]]:
    """The files under `prefix` (a directory, or one file) of `commit`, and the prefix their paths start with."""
    base = prefix + "/" if prefix else ""
    files = {p: e for p, e in commit.files.items() if p.startswith(base)}
    if not prefix or files:
        return base, files
    if prefix in commit.files:
        return "", {prefix: commit.files[prefix]}
    raise HubError(404, f"{prefix} does not exist on {commit.oid}", "EntryNotFound")


def _parent_dirs(base: str, parts: list[str], recursive: bool) -> list[str]:
    """The directory entries a file's path adds to a tree listing: every parent when recursive, else the first."""
    dirs = [base + "/".join(parts[:i]) for i in range(1, len(parts))]
    return dirs if recursive else dirs[:1]


def _file_entry(path: str, e: FileEntry, repo: Repo | None) -> dict[str, Any]:
    """One file of a tree listing; with `repo` (expand=true) its last commit too."""
    doc: dict[str, Any] = {"type": "file", "oid": e.blob_id, "size": e.size, "path": path}
    if e.sha256:
        pointer = LFS_POINTER.format(oid=e.sha256, size=e.size)
        doc["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": len(pointer)}
    lc = repo.commits.get(e.last_commit) if repo is not None else None
    if lc is not None:
        doc["lastCommit"] = {"id": lc.oid, "title": lc.title, "date": lc.date}
    return doc


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read state.requests instead
        pass

    # --- plumbing ------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
        head: bool = False,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _json(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(doc).encode(), headers)

    def _error(self, exc: HubError, head: bool = False) -> None:
        headers = {"X-Error-Message": exc.message}
        if exc.code:
            headers["X-Error-Code"] = exc.code
        self._send(exc.status, json.dumps({"error": exc.message}).encode(), headers, head=head)

    def _auth(self) -> None:
        header = self.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else None
        if token not in self.server.state.tokens:
            raise HubError(401, "Invalid credentials in Authorization header")

    def _dispatch(self, method: str) -> None:
        st = self.server.state
        split = urlsplit(self.path)
        path, query = split.path, parse_qs(split.query)
        with st.lock:
            st.requests.append((method, self.path, self.headers.get("Authorization")))
        body = self._body() if method in ("POST", "PUT", "DELETE") else b""
        try:
            for hook in st.hooks:
                hook(method, path)
            for pattern, handler in ROUTES:
                if pattern[0] != method and not (pattern[0] == "GET" and method == "HEAD"):
                    continue
                m = re.fullmatch(pattern[1], path)
                if m:
                    name = handler.__name__
                    with st.lock:
                        if st.fail_next.get(name, 0) > 0:
                            st.fail_next[name] -= 1
                            raise HubError(500, f"injected failure in {name}")
                    handler(self, m, query, body, method == "HEAD")
                    return
            raise HubError(404, f"no route for {method} {path}")
        except HubError as exc:
            self._error(exc, head=method == "HEAD")

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # --- endpoints -------------------------------------------------------------------------------------
    def _repo(self, m: re.Match, type_key: str = "type") -> Repo:
        rtype = PLURAL.get(m.group(type_key), m.group(type_key)) if type_key in m.groupdict() else "model"
        return self.server.state.repo(rtype, f"{m.group('ns')}/{m.group('name')}")

    def create_repo(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        self._auth()
        st = self.server.state
        doc = json.loads(body or b"{}")
        rtype = doc.get("type") or "model"
        ns = doc.get("organization") or "user"
        repo_id = f"{ns}/{doc['name']}"
        url = f"{self.server.url}/{TYPE_PREFIX.get(rtype, '')}{repo_id}"
        with st.lock:
            if (rtype, repo_id) in st.repos:
                return self._json(409, {"error": "You already created this repo", "url": url})
            repo = Repo(rtype, repo_id, private=doc.get("visibility") == "private")
            readme = b"---\n{}\n---\n"
            gitattributes = b"".join(f"*{s} filter=lfs diff=lfs merge=lfs -text\n".encode() for s in LFS_SUFFIXES)
            files = {}
            for p, data in ((".gitattributes", gitattributes),):
                bid = git_blob_id(data)
                st.blobs[bid] = data
                files[p] = FileEntry(len(data), bid, None, bid)
            c = st.new_commit(repo, None, files, "initial commit")
            files = {p: FileEntry(e.size, e.blob_id, e.sha256, e.content_key, c.oid) for p, e in files.items()}
            c.files = files
            repo.branches["main"] = c.oid
            st.repos[(rtype, repo_id)] = repo
            del readme
        self._json(200, {"url": url, "name": repo_id, "id": hashlib.md5(repo_id.encode()).hexdigest()})

    def repo_info(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        st = self.server.state
        with st.lock:
            repo = self._repo(m)
            rev = unquote(m.group("rev")) if m.group("rev") else "main"
            oid = st.resolve(repo, rev)
            c = repo.commits[oid]
            doc = {
                "id": repo.id,
                "author": repo.id.split("/")[0],
                "sha": oid,
                "private": repo.private,
                "lastModified": c.date,
                "siblings": [{"rfilename": p} for p in sorted(c.files)],
                "tags": [],
                "downloads": 0,
                "likes": 0,
                "gated": False,
                "disabled": False,
            }
        self._json(200, doc)

    def refs(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        st = self.server.state
        with st.lock:
            repo = self._repo(m)
            branches = [
                {"name": n, "ref": f"refs/heads/{n}", "targetCommit": oid}
                for n, oid in sorted(repo.branches.items())
                if not n.startswith("refs/")
            ]
            prs = [
                {"name": n, "ref": n, "targetCommit": oid}
                for n, oid in sorted(repo.branches.items())
                if n.startswith("refs/pr/")
            ]
        doc: dict[str, Any] = {"branches": branches, "tags": [], "converts": []}
        if q.get("include_prs"):
            doc["pullRequests"] = prs
        self._json(200, doc)

    def create_branch(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        self._auth()
        st = self.server.state
        branch = unquote(m.group("branch"))
        doc = json.loads(body or b"{}")
        with st.lock:
            repo = self._repo(m)
            if branch in repo.branches:
                raise HubError(409, f"Reference refs/heads/{branch} already exists")
            start = doc.get("startingPoint") or "main"
            repo.branches[branch] = st.resolve(repo, start)
        self._json(200, {})

    def delete_branch(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        self._auth()
        st = self.server.state
        with st.lock:
            repo = self._repo(m)
            if repo.branches.pop(unquote(m.group("branch")), None) is None:
                raise HubError(404, "Invalid rev id", "RevisionNotFound")
        self._json(200, {})

    def _needs_lfs(self, path: str, size: int, sample: bytes) -> bool:
        return path.endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE or b"\0" in sample

    def preupload(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        self._auth()
        st = self.server.state
        doc = json.loads(body)
        rev = unquote(m.group("rev")).removeprefix("refs/heads/")
        with st.lock:
            repo = self._repo(m)
            files = repo.commits[st.resolve(repo, rev)].files if rev in repo.branches or rev in repo.commits else {}
            out = []
            for f in doc["files"]:
                lfs = self._needs_lfs(f["path"], f["size"], base64.b64decode(f["sample"]))
                existing = files.get(f["path"])
                oid = None
                if existing is not None:
                    oid = existing.sha256 if existing.sha256 else existing.blob_id
                out.append(
                    {"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
                )
        self._json(200, {"files": out, "commitOid": files and None})

    def lfs_batch(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        self._auth()
        st = self.server.state
        doc = json.loads(body)
        objects = []
        with st.lock:
            self._repo(m)
            for o in doc["objects"]:
                entry: dict[str, Any] = {"oid": o["oid"], "size": o["size"], "authenticated": True}
                if o["oid"] not in st.lfs:
                    entry["actions"] = {
                        "upload": {"href": f"{self.server.url}/lfs-upload/{o['oid']}/{o['size']}", "header": {}},
                        "verify": {"href": f"{self.server.url}/lfs-verify", "header": {}},
                    }
                objects.append(entry)
        self._send(
            200,
            json.dumps({"transfer": "basic", "objects": objects}).encode(),
            content_type="application/vnd.git-lfs+json",
        )

    def lfs_upload(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        oid, size = m.group("oid"), int(m.group("size"))
        if hashlib.sha256(body).hexdigest() != oid or len(body) != size:
            raise HubError(400, f"uploaded bytes do not match oid {oid} / size {size}")
        with self.server.state.lock:
            self.server.state.lfs[oid] = body
        self._send(200, b"")

    def lfs_verify(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        doc = json.loads(body)
        data = self.server.state.lfs.get(doc["oid"])
        if data is None or len(data) != doc["size"]:
            raise HubError(404, f"LFS object {doc['oid']} not uploaded")
        self._json(200, {})

    def commit(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        self._auth()
        st = self.server.state
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header: dict[str, Any] = next((x["value"] for x in lines if x["key"] == "header"), {})
        rev = unquote(m.group("rev")).removeprefix("refs/heads/")
        create_pr = bool(q.get("create_pr"))
        with st.lock:
            repo = self._repo(m)
            base = st.resolve(repo, rev)
            parent_commit = header.get("parentCommit")
            if parent_commit and parent_commit != base:
                raise HubError(
                    412,
                    f"A commit has happened since. Please refresh and try again. "
                    f"(parent {parent_commit} != head {base})",
                )
            files = _apply_operations(st, dict(repo.commits[base].files), lines)
            c = st.new_commit(repo, base, {}, header.get("summary", ""))
            old = repo.commits[base].files
            c.files = {
                p: (e if old.get(p) == e else FileEntry(e.size, e.blob_id, e.sha256, e.content_key, c.oid))
                for p, e in files.items()
            }
            pr_url = None
            if create_pr:
                n = len(repo.prs) + 1
                ref = f"refs/pr/{n}"
                repo.prs.append(ref)
                repo.branches[ref] = c.oid
                pr_url = f"{self.server.url}/{TYPE_PREFIX[repo.type]}{repo.id}/discussions/{n}"
            else:
                repo.branches[rev if rev in repo.branches else "main"] = c.oid
        self._json(
            200,
            {
                "commitOid": c.oid,
                "commitUrl": f"{self.server.url}/{TYPE_PREFIX[repo.type]}{repo.id}/commit/{c.oid}",
                "pullRequestUrl": pr_url,
                "success": True,
            },
        )

    def _entries(self, commit: Commit, prefix: str, recursive: bool, expand: bool, repo: Repo) -> list[dict]:
        base, files = _listed_files(commit, prefix.strip("/"))
        out: dict[str, dict] = {}
        for p, e in sorted(files.items()):
            parts = p[len(base) :].split("/")
            for d in _parent_dirs(base, parts, recursive):
                out.setdefault(
                    d, {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                )
            if len(parts) == 1 or recursive:
                out[p] = _file_entry(p, e, repo if expand else None)
        return [out[k] for k in sorted(out)]

    def tree(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        st = self.server.state
        recursive = q.get("recursive", ["False"])[0].lower() == "true"
        expand = q.get("expand", ["False"])[0].lower() == "true"
        with st.lock:
            repo = self._repo(m)
            commit = repo.commits[st.resolve(repo, unquote(m.group("rev")))]
            entries = self._entries(commit, unquote(m.group("path") or ""), recursive, expand, repo)
        self._json(200, entries)

    def paths_info(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        st = self.server.state
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            doc = json.loads(body)
            paths, expand = doc.get("paths", []), bool(doc.get("expand"))
        else:
            form = parse_qs(body.decode())
            paths, expand = form.get("paths", []), form.get("expand", ["false"])[0] == "true"
        with st.lock:
            repo = self._repo(m)
            commit = repo.commits[st.resolve(repo, unquote(m.group("rev")))]
            out = []
            for p in paths:
                if p in commit.files:
                    parent = p.rsplit("/", 1)[0] if "/" in p else ""
                    out += [e for e in self._entries(commit, parent, False, expand, repo) if e["path"] == p]
        self._json(200, out)

    def commits(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        st = self.server.state
        with st.lock:
            repo = self._repo(m)
            hist = st.history(repo.type, repo.id, unquote(m.group("rev")))
        self._json(
            200,
            [
                {"id": c.oid, "title": c.title, "message": "", "date": c.date, "authors": [{"user": "test"}]}
                for c in hist
            ],
        )

    def resolve(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        st = self.server.state
        with st.lock:
            repo = self._repo(m, "type") if m.group("type") else st.repo("model", f"{m.group('ns')}/{m.group('name')}")
            oid = st.resolve(repo, unquote(m.group("rev")))
            path = unquote(m.group("path"))
            entry = repo.commits[oid].files.get(path)
            if entry is None:
                raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
            data = st.content(entry)
        headers = {"X-Repo-Commit": oid, "ETag": f'"{entry.sha256 or entry.blob_id}"', "Accept-Ranges": "bytes"}
        if entry.sha256:
            headers["X-Linked-Etag"] = f'"{entry.sha256}"'
            headers["X-Linked-Size"] = str(entry.size)
        rng = self.headers.get("Range")
        if rng and not head:
            start = int(rng.split("=")[1].split("-")[0])
            self._send(206, data[start:], headers, "application/octet-stream")
            return
        if head:
            self.send_response(200)
            for k, v in {
                **headers,
                "Content-Type": "application/octet-stream",
                "Content-Length": str(len(data)),
            }.items():
                self.send_header(k, v)
            self.end_headers()
            return
        self._send(200, data, headers, "application/octet-stream")

    def validate_yaml(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        doc = json.loads(body)
        content = doc.get("content", "")
        if content.startswith("---") and content.count("---") < 2:
            return self._json(400, {"errors": [{"message": "unterminated YAML front matter"}], "warnings": []})
        self._json(200, {"errors": [], "warnings": []})

    def whoami(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        self._auth()
        self._json(
            200,
            {
                "type": "user",
                "name": "ggml-test",
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"role": "write"}},
            },
        )

    def org_overview(self, m: re.Match, q: dict, body: bytes, head: bool) -> None:
        org = m.group("org")
        st = self.server.state
        if org not in st.orgs:
            raise HubError(404, f"Organization {org} not found")
        self._json(
            200,
            {
                "name": org,
                "fullname": org,
                "avatarUrl": "",
                "isFollowing": False,
                "numUsers": 1,
                "numModels": 0,
                "numSpaces": 0,
                "numDatasets": 0,
                "numFollowers": 0,
                "numPapers": 0,
                "trustedKernelPublisher": st.orgs[org],
            },
        )


_T = r"(?P<type>models|datasets|spaces|kernels)"
_R = r"(?P<ns>[^/]+)/(?P<name>[^/]+)"
ROUTES: list[tuple[tuple[str, str], Callable]] = [
    (("POST", r"/api/repos/create"), _Handler.create_repo),
    (("GET", rf"/api/{_T}/{_R}(?:/revision/(?P<rev>[^/]+))?"), _Handler.repo_info),
    (("GET", rf"/api/{_T}/{_R}/refs"), _Handler.refs),
    (("POST", rf"/api/{_T}/{_R}/branch/(?P<branch>[^/]+)"), _Handler.create_branch),
    (("DELETE", rf"/api/{_T}/{_R}/branch/(?P<branch>[^/]+)"), _Handler.delete_branch),
    (("POST", rf"/api/{_T}/{_R}/preupload/(?P<rev>[^/]+)"), _Handler.preupload),
    (("POST", rf"/api/{_T}/{_R}/commit/(?P<rev>[^/]+)"), _Handler.commit),
    (("GET", rf"/api/{_T}/{_R}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?"), _Handler.tree),
    (("POST", rf"/api/{_T}/{_R}/paths-info/(?P<rev>[^/]+)"), _Handler.paths_info),
    (("GET", rf"/api/{_T}/{_R}/commits/(?P<rev>[^/]+)"), _Handler.commits),
    (("POST", rf"/(?:(?P<type>datasets|spaces|kernels)/)?{_R}\.git/info/lfs/objects/batch"), _Handler.lfs_batch),
    (("PUT", r"/lfs-upload/(?P<oid>[0-9a-f]{64})/(?P<size>\d+)"), _Handler.lfs_upload),
    (("POST", r"/lfs-verify"), _Handler.lfs_verify),
    (("GET", rf"/(?:(?P<type>datasets|spaces|kernels)/)?{_R}/resolve/(?P<rev>[^/]+)/(?P<path>.+)"), _Handler.resolve),
    (("POST", r"/api/validate-yaml"), _Handler.validate_yaml),
    (("GET", r"/api/whoami-v2"), _Handler.whoami),
    (("GET", r"/api/organizations/(?P<org>[^/]+)/overview"), _Handler.org_overview),
]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState
    url: str


class HubServer:
    """`with HubServer() as hub:` serves on http://127.0.0.1:<free port> from a background thread."""

    def __init__(self, state: HubState | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = state or HubState()
        self._httpd = _Server((host, port), _Handler)
        self._httpd.state = self.state
        self.url = f"http://{host}:{self._httpd.server_address[1]}"
        self._httpd.url = self.url
        self._thread: threading.Thread | None = None

    def start(self) -> HubServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="hubserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def client_env(endpoint: str, cache: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that loads kernels from the hub at `endpoint` (kernels.get_kernel) with
    its own download cache: no Xet, online, no local-kernel overrides."""
    env = {
        **(os.environ if base is None else base),
        "HF_ENDPOINT": endpoint,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_CACHE": str(cache),
        "KERNELS_CACHE": str(cache),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HF_HUB_OFFLINE": "0",
    }
    # kernels 0.17.2 with huggingface_hub 2.x sends an invalid User-Agent (trailing "; ") when telemetry is off.
    env.pop("HF_HUB_DISABLE_TELEMETRY", None)
    env.pop("LOCAL_KERNELS", None)
    return env


def main() -> None:  # pragma: no cover - manual use: python -m toolkit.testing.localhub
    import argparse

    ap = argparse.ArgumentParser(description="serve a local test Hub")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--token", default="hf_test_token")
    args = ap.parse_args()
    hub = HubServer(HubState(tokens=(args.token,)), port=args.port).start()
    print(hub.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        hub.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
