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

The state is in hub_state.py, the HTTP plumbing in hub_http.py, the endpoints in hub_repos.py and
hub_files.py; this module routes requests to them and runs the server.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from toolkit.testing.hub_files import FileEndpoints
from toolkit.testing.hub_http import HubHTTPServer, Query
from toolkit.testing.hub_repos import RepoEndpoints
from toolkit.testing.hub_state import HubError, HubState


class _Handler(RepoEndpoints, FileEndpoints):
    """Every endpoint, reached through ROUTES: a request is logged, its hooks and injected faults run, then
    the first route whose method and path match answers it."""

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


_T = r"(?P<type>models|datasets|spaces|kernels)"
_R = r"(?P<ns>[^/]+)/(?P<name>[^/]+)"
# An endpoint: a handler method, called with the route's match, the query, the body and whether it is a HEAD.
Endpoint = Callable[[_Handler, re.Match[str], Query, bytes, bool], None]
ROUTES: list[tuple[tuple[str, str], Endpoint]] = [
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


class HubServer:
    """`with HubServer() as hub:` serves on http://127.0.0.1:<free port> from a background thread."""

    def __init__(self, state: HubState | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = state or HubState()
        self._httpd = HubHTTPServer((host, port), _Handler)
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
