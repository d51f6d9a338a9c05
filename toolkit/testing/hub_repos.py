"""The local test Hub's repository and account endpoints: repo creation and info, refs, branches, README
metadata validation, whoami and organization overview (kernels' trust check)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from urllib.parse import unquote

from toolkit.core.hashing import git_blob_id
from toolkit.testing.hub_http import HandlerBase, Query
from toolkit.testing.hub_state import LFS_SUFFIXES, TYPE_PREFIX, FileEntry, HubError, Repo


class RepoEndpoints(HandlerBase):
    def create_repo(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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

    def repo_info(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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

    def refs(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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

    def create_branch(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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

    def delete_branch(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
        self._auth()
        st = self.server.state
        with st.lock:
            repo = self._repo(m)
            if repo.branches.pop(unquote(m.group("branch")), None) is None:
                raise HubError(404, "Invalid rev id", "RevisionNotFound")
        self._json(200, {})

    def validate_yaml(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
        doc = json.loads(body)
        content = doc.get("content", "")
        if content.startswith("---") and content.count("---") < 2:
            return self._json(400, {"errors": [{"message": "unterminated YAML front matter"}], "warnings": []})
        self._json(200, {"errors": [], "warnings": []})

    def whoami(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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

    def org_overview(self, m: re.Match[str], q: Query, body: bytes, head: bool) -> None:
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
