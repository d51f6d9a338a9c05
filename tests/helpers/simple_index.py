"""A simple package index (PEP 503 HTML, PEP 691 JSON, PEP 658 core metadata) on 127.0.0.1, serving the release
metadata in tests/fixtures/index/releases.json (real releases of torch, kernels and transformers as pip's default
index lists them, plus one future torch marked as invented).

`style`: "json" (PEP 691, core metadata advertised), "html" (PEP 503 anchors, data-core-metadata), "ranges" (JSON
without core metadata: the client must read METADATA from the wheel by byte ranges; each wheel is served as a
small zip holding the release's real METADATA), or "malformed" (every project page is broken). `requests` records
each path asked for.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from packaging.utils import parse_sdist_filename, parse_wheel_filename

from tests.helpers import FIXTURES

RELEASES = FIXTURES / "index" / "releases.json"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def load_releases(path: Path = RELEASES) -> dict[str, Any]:
    projects: dict[str, Any] = json.loads(path.read_text())["projects"]
    return projects


def _version(filename: str) -> str:
    if filename.endswith(".whl"):
        return str(parse_wheel_filename(filename)[1])
    return str(parse_sdist_filename(filename)[1])


@dataclass
class IndexState:
    projects: dict[str, Any]
    style: str = "json"
    requests: list[str] = field(default_factory=list)

    def metadata(self, project: str, filename: str) -> str | None:
        meta: str | None = self.projects.get(project, {}).get("metadata", {}).get(_version(filename))
        return meta


def _wheel(filename: str, metadata: str) -> bytes:
    """A zip standing for the wheel: the release's real METADATA in its .dist-info, and some padding so that the
    central directory sits far from the start (the client must seek, as in a real wheel)."""
    name, version = filename.split("-")[:2]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{name}/padding.bin", bytes(600_000))
        zf.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return buf.getvalue()


class _Handler(BaseHTTPRequestHandler):
    state: IndexState

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.state.requests.append(self.path)
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if len(parts) == 2 and parts[0] == "simple":
            return self._project(parts[1])
        if len(parts) == 3 and parts[0] == "files":
            return self._file(parts[1], parts[2])
        self._send(404, b"not found", "text/plain")

    def _project(self, project: str) -> None:
        data = self.state.projects.get(project)
        if data is None:
            return self._send(404, b"not found", "text/plain")
        if self.state.style == "malformed":
            return self._send(200, b'{"files": [{"filename": 3', JSON_TYPE)
        files = data["files"]
        advertise = self.state.style in ("json", "html")
        if self.state.style == "html":
            links = []
            for f in files:
                meta = self.state.metadata(project, f["filename"])
                attrs = (
                    f' data-core-metadata="sha256={hashlib.sha256(meta.encode()).hexdigest()}"'
                    if meta and advertise
                    else ""
                )
                attrs += ' data-yanked=""' if f.get("yanked") else ""
                href = f"../../files/{project}/{f['filename']}#sha256={f['hashes']['sha256']}"
                links.append(f'<a href="{html.escape(href)}"{attrs}>{html.escape(f["filename"])}</a><br/>')
            page = "<!DOCTYPE html><html><body><h1>Links for " + project + "</h1>" + "".join(links) + "</body></html>"
            return self._send(200, page.encode(), "text/html")
        doc: dict[str, Any] = {"meta": {"api-version": "1.1"}, "name": project, "files": []}
        for f in files:
            meta = self.state.metadata(project, f["filename"])
            row = {k: v for k, v in f.items() if k != "invented"}
            row["url"] = f"../../files/{project}/{f['filename']}"
            if meta and advertise:
                row["core-metadata"] = {"sha256": hashlib.sha256(meta.encode()).hexdigest()}
            doc["files"].append(row)
        self._send(200, json.dumps(doc).encode(), JSON_TYPE)

    def _file(self, project: str, filename: str) -> None:
        if filename.endswith(".metadata"):
            meta = self.state.metadata(project, filename.removesuffix(".metadata"))
            if meta is None or self.state.style == "ranges":
                return self._send(404, b"not found", "text/plain")
            return self._send(200, meta.encode(), "text/plain")
        meta = self.state.metadata(project, filename)
        if meta is None or not filename.endswith(".whl"):
            return self._send(404, b"no such file here", "text/plain")
        body = _wheel(filename, meta)
        rng = self.headers.get("Range", "")
        if not rng.startswith("bytes="):
            return self._send(200, body, "application/octet-stream")
        start_s, end_s = rng[len("bytes=") :].split("-")
        start, end = int(start_s), min(int(end_s), len(body) - 1)
        self._send(
            206,
            body[start : end + 1],
            "application/octet-stream",
            {"Content-Range": f"bytes {start}-{end}/{len(body)}"},
        )


@contextmanager
def serve_index(style: str = "json", projects: dict[str, Any] | None = None) -> Iterator[tuple[str, IndexState]]:
    """(the index URL, its state) while the server runs on a free loopback port."""
    state = IndexState(projects if projects is not None else load_releases(), style)
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
