"""The local Hub server keeps the Hub's rules that publish relies on: writes need a token, LFS bytes must
match their oid, commits refuse unknown LFS objects and stale parents, errors carry the Hub's error codes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import CommitOperationAdd, HfApi
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

from tests.helpers.hubserver import HubServer, HubState
from tests.helpers.hubserver.variants import NAME, make_variant, write_lock, write_project
from toolkit.core import config
from toolkit.publish.hub import lfs_only
from toolkit.verify import VerifyOptions, verify_build


@pytest.fixture
def hub() -> Iterator[HubServer]:
    with HubServer(HubState(tokens=("tok",))) as h, lfs_only(True):
        yield h


def test_writes_need_a_known_token(hub: HubServer) -> None:
    with pytest.raises(HfHubHTTPError) as exc:
        HfApi(endpoint=hub.url, token="wrong").create_repo("o/r", repo_type="kernel")
    assert exc.value.response.status_code == 401
    assert hub.state.repos == {}


def test_errors_carry_hub_error_codes(hub: HubServer) -> None:
    api = HfApi(endpoint=hub.url, token="tok")
    with pytest.raises(RepositoryNotFoundError):
        api.list_repo_refs("o/missing", repo_type="kernel")
    api.create_repo("o/r", repo_type="kernel")
    with pytest.raises(RevisionNotFoundError):
        list(api.list_repo_tree("o/r", repo_type="kernel", revision="v9"))
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree("o/r", repo_type="kernel", path_in_repo="build"))
    assert api.repo_info("o/r", repo_type="kernel").sha == hub.state.repo("kernel", "o/r").branches["main"]


def test_lfs_bytes_must_match_their_oid_and_commits_need_uploaded_objects(hub: HubServer) -> None:
    import httpx2

    data = b"\x7fELF" + os.urandom(64)
    oid = hashlib.sha256(data).hexdigest()
    r = httpx2.put(f"{hub.url}/lfs-upload/{oid}/{len(data)}", content=data[:-1] + b"x", timeout=60)
    assert r.status_code == 400 and oid not in hub.state.lfs
    api = HfApi(endpoint=hub.url, token="tok")
    api.create_repo("o/r", repo_type="kernel")
    body = "\n".join(
        json.dumps(x)
        for x in (
            {"key": "header", "value": {"summary": "s"}},
            {"key": "lfsFile", "value": {"path": "x.so", "algo": "sha256", "oid": oid, "size": len(data)}},
        )
    ).encode()
    r = httpx2.post(
        f"{hub.url}/api/kernels/o/r/commit/main",
        content=body,
        headers={"Authorization": "Bearer tok", "Content-Type": "application/x-ndjson"},
        timeout=60,
    )
    assert r.status_code == 422 and "never uploaded" in r.text
    info = api.create_commit("o/r", [CommitOperationAdd("x.so", data)], commit_message="real", repo_type="kernel")
    assert hub.state.read("kernel", "o/r", info.oid, "x.so") == data
    entry = hub.state.history("kernel", "o/r", "main")[0].files["x.so"]
    assert entry.sha256 == oid  # stored through LFS, as the Hub stores binaries


def test_cli_dry_run_prints_the_plan_and_pushes_nothing(tmp_path: Path, hub: HubServer) -> None:

    root = write_project(tmp_path / "p", hub_repo="o/kern")
    v = make_variant(root / "build" / NAME)
    cmd = [sys.executable, "-m", "toolkit.cli", "publish", "-C", str(root), "--dry-run", "--endpoint", hub.url]
    env = {**os.environ, "HF_TOKEN": ""}
    # no vendor lock yet: refused before any request, with the reason
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert proc.returncode == 9 and "vendor/UPSTREAM is missing" in proc.stderr
    assert hub.state.requests == []
    write_lock(root)
    assert verify_build(config.load(root), options=VerifyOptions(smoke=False)).ok
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "branch v1 (new): 6 to add, 0 to delete, 0 unchanged" in proc.stdout  # the variant and its source
    assert "+ torch-ext/registration.h" in proc.stdout and "+ torch-ext/ggml_attn_kernels/_ops.py" in proc.stdout
    assert f"+ build/{v.name}/metadata.json" in proc.stdout and "dry run: nothing was pushed" in proc.stdout
    assert [r for r in hub.state.requests if r[0] != "GET"] == []


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_unreachable_hub_is_one_line_and_exit_9(tmp_path: Path, dry_run: bool) -> None:
    root = write_project(tmp_path / "p", hub_repo="o/kern")
    make_variant(root / "build" / NAME)
    write_lock(root)
    assert verify_build(config.load(root), options=VerifyOptions(smoke=False)).ok
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    cmd = [sys.executable, "-m", "toolkit.cli", "publish", "-C", str(root), "--endpoint", endpoint]
    proc = subprocess.run(
        cmd + (["--dry-run"] if dry_run else []),
        capture_output=True,
        text=True,
        env={**os.environ, "HF_TOKEN": "tok"},
        timeout=120,
    )
    assert proc.returncode == 9, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"cannot reach {endpoint}" in errors[0] and "HF_ENDPOINT" in errors[0]
    assert not (root / "build" / NAME / "publish-report.json").exists()
