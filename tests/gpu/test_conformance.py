"""The conformance gate on a real GPU (issue 11): a copy of this project whose vendored kernel's state indexing is
flipped without touching any declaration builds, and verify's conformance gate fails it (the CPU cases of the
gate are tests/verify/test_conformance.py's)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.machine import cuda_device_available, nvcc_available

REPO = Path(__file__).resolve().parents[2]


# --- GPU: the gate on the real build, and on a silently flipped kernel ----------------------------------


def _gpu_ready() -> None:
    for ok, why in (cuda_device_available(), nvcc_available()):
        if not ok:
            pytest.skip(why)
    if not (REPO / "vendor" / "ggml" / "src" / "ggml-cuda" / "gated_delta_net.cu").is_file():
        pytest.skip("vendor/ is not populated: run ggml-vendor sync first")


def _cli(root: Path, *args: str, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    # the build cache of this checkout: objects the flip does not touch (flash attention, the shim) are hits
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {"GGML_VENDOR_BUILD_CACHE": str(REPO / ".cache" / "build"), **os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args, "-C", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


# the package whose kernel the test flips: one package's build and verify (a project of several packages would
# build them all, and `verify --json` over several answers {"packages": {name: doc}})
PACKAGE = ("-p", "ggml-attn-kernels")


def _conformance_rows(root: Path) -> list[dict[str, Any]]:
    proc = _cli(root, "verify", *PACKAGE, "--json", "--host-toolchain")  # a local build: manylinux ceilings waived
    doc = json.loads(proc.stdout)
    return [f for v in doc["variants"] for f in v["findings"] if f["check"] == "conformance"]


@pytest.mark.gpu
@pytest.mark.slow
def test_gate_fails_when_the_state_indexing_is_flipped(tmp_path: Path) -> None:
    """A copy of this project whose vendored gated_delta_net.cu reads and writes the state [key][value]
    (no declaration touched: sync's signature fingerprints would not notice) builds, and verify fails."""
    _gpu_ready()
    from tests.helpers.gdn_flip import flip_state_indexing

    copy = tmp_path / "proj"
    ignore = shutil.ignore_patterns(
        "build", ".git", ".gpu", ".whl", ".cache", "__pycache__", ".pytest_cache", "benchmarks"
    )
    shutil.copytree(REPO, copy, ignore=ignore, symlinks=True)
    kernel = copy / "vendor" / "ggml" / "src" / "ggml-cuda" / "gated_delta_net.cu"
    kernel.write_text(flip_state_indexing(kernel.read_text()))
    build = _cli(copy, "build", *PACKAGE, "-j", str(os.cpu_count() or 2))
    assert build.returncode == 0, build.stderr[-3000:]
    rows = _conformance_rows(copy)
    print("\n".join(f"{r['variant']}: {r['status']}: {r['message']}" for r in rows))
    assert rows and all(r["status"] == "fail" for r in rows), rows
    assert "gdn-decode" in rows[0]["message"] and "state-kv" in rows[0]["message"]
