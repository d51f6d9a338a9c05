"""The local test Hub's file endpoints: the commit flow (preupload -> LFS batch -> PUT upload -> verify ->
ndjson commit, `parentCommit` guarded, `create_pr`) and the reads (tree listing, paths-info, commit history,
file download)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any
from urllib.parse import parse_qs, unquote

from toolkit.testing.hub_http import HandlerBase, Query
from toolkit.testing.hub_state import (
    LFS_MIN_SIZE,
    LFS_SUFFIXES,
    TYPE_PREFIX,
    Commit,
    FileEntry,
    HubError,
    Repo,
    apply_operations,
    file_entry,
    listed_files,
    parent_dirs,
)


class FileEndpoints(HandlerBase):
    def _needs_lfs(self, path: str, size: int, sample: bytes) -> bool:
        return path.endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE or b"\0" in sample

    def preupload(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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

    def lfs_batch(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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

    def lfs_upload(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
        oid, size = m.group("oid"), int(m.group("size"))
        if hashlib.sha256(body).hexdigest() != oid or len(body) != size:
            raise HubError(400, f"uploaded bytes do not match oid {oid} / size {size}")
        with self.server.state.lock:
            self.server.state.lfs[oid] = body
        self._send(200, b"")

    def lfs_verify(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
        doc = json.loads(body)
        data = self.server.state.lfs.get(doc["oid"])
        if data is None or len(data) != doc["size"]:
            raise HubError(404, f"LFS object {doc['oid']} not uploaded")
        self._json(200, {})

    def commit(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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
            files = apply_operations(st, dict(repo.commits[base].files), lines)
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

    def _entries(self, commit: Commit, prefix: str, recursive: bool, expand: bool, repo: Repo) -> list[dict[str, Any]]:
        base, files = listed_files(commit, prefix.strip("/"))
        out: dict[str, dict[str, Any]] = {}
        for p, e in sorted(files.items()):
            parts = p[len(base) :].split("/")
            for d in parent_dirs(base, parts, recursive):
                out.setdefault(
                    d, {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                )
            if len(parts) == 1 or recursive:
                out[p] = file_entry(p, e, repo if expand else None)
        return [out[k] for k in sorted(out)]

    def tree(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
        st = self.server.state
        recursive = q.get("recursive", ["False"])[0].lower() == "true"
        expand = q.get("expand", ["False"])[0].lower() == "true"
        with st.lock:
            repo = self._repo(m)
            commit = repo.commits[st.resolve(repo, unquote(m.group("rev")))]
            entries = self._entries(commit, unquote(m.group("path") or ""), recursive, expand, repo)
        self._json(200, entries)

    def paths_info(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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

    def commits(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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

    def resolve(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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
