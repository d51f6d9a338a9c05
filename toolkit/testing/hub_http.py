"""The local test Hub's HTTP plumbing: reading a request's body (chunked or not), answering JSON or an error
the way huggingface_hub reads it, the write token check and the repository a route names. The endpoints
(hub_repos.py, hub_files.py) stand on it; localhub.py routes requests to them."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from toolkit.testing.hub_state import PLURAL, HubError, HubState, Repo

# A request's query string as parse_qs reads it: every name with its values, in order.
Query = dict[str, list[str]]


class HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    state: HubState
    url: str


class HandlerBase(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubHTTPServer

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

    def _repo(self, m: re.Match[str], type_key: str = "type") -> Repo:
        rtype = PLURAL.get(m.group(type_key), m.group(type_key)) if type_key in m.groupdict() else "model"
        return self.server.state.repo(rtype, f"{m.group('ns')}/{m.group('name')}")
