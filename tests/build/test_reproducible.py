"""Two clean builds of one package, in two directories, are the same bytes (issue 33 item 7): nvcc names
anonymous namespaces (and, with -rdc, static kernels) after a hash of the translation unit's real path, which
no -ffile-prefix-map reaches, so the executor compiles every CUDA source from a fixed path. Built for real:
the miniature kernel package with an anonymous-namespace kernel added, twice, each with its own cold cache;
and the rendered package against the miniature upstream (the binding tests' build, plus a second one
elsewhere). Skipped, with the reason, where nvcc or a CUDA build of torch is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import BUILD_KERNEL, render_source
from tests.helpers.machine import binding_build_unavailable, local_cuda_build_unavailable

pytestmark: pytest.MarkDecorator | list[pytest.MarkDecorator] = pytest.mark.slow

_SKIP = binding_build_unavailable() or local_cuda_build_unavailable()
if _SKIP:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason=_SKIP)]


def _variants(root: Path, doc: dict[str, Any]) -> dict[str, tuple[bytes, dict[str, Any]]]:
    """variant -> (its .so's bytes, its metadata.json digest)."""
    out = {}
    for r in doc["variants"]:
        if r["result"] not in ("built", "up-to-date"):
            continue
        d = root / r["out_dir"]
        out[r["name"]] = (
            (d / f"{r['id']}.abi3.so").read_bytes(),
            json.loads((d / "metadata.json").read_text())["digest"],
        )
    return out


def test_two_clean_builds_in_two_directories_are_byte_identical(
    built_binding: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    first_root, first_doc = built_binding
    # Another directory, of another length, with its own cold build cache: nothing is shared with the first.
    second_root = tmp_path / "somewhere-else" / "deeper" / "proj"
    shutil.copytree(first_root, second_root, ignore=shutil.ignore_patterns("build"), symlinks=True)
    render_source(second_root)
    env = dict(os.environ, GGML_VENDOR_BUILD_CACHE=str(tmp_path / "cold-cache"))
    res = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "build", "--json", "-j", "2", "-C", str(second_root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    second_doc = json.loads(res.stdout)
    assert second_doc["compiler_invocations"] > 0, "the second build was not a clean one"
    first, second = _variants(first_root, first_doc), _variants(second_root, second_doc)
    assert first and set(first) == set(second)
    for name in first:
        assert first[name][1] == second[name][1], f"{name}: metadata.json digests differ"
        a, b = first[name][0], second[name][0]
        assert a == b, (
            f"{name}: the .so files differ in {sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))} bytes"
        )


# Appended to the miniature package's CUDA source: the kind of code nvcc names after the translation unit's
# path (upstream's gdn.cu holds such kernels). Reached from an exported function, so it is compiled and kept.
ANONYMOUS_KERNEL = """
namespace {
__global__ void mini_fill_kernel(float * dst, const float v, const long n) {
    const long i = (long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        dst[i] = v;
    }
}
}  // namespace

void mini_fill_launch(float * dst, float v, int64_t n, void * stream) {
    mini_fill_kernel<<<(int) ((n + MINI_BLOCK_SIZE - 1) / MINI_BLOCK_SIZE), MINI_BLOCK_SIZE, 0, (cudaStream_t) stream>>>(
        dst, v, n);
}
"""


def _clean_build(root: Path, cache: Path, envs: Path, tmpdir: Path) -> dict[str, tuple[bytes, dict[str, Any]]]:
    """Copy the miniature package to `root` with ANONYMOUS_KERNEL added, render and build it with `cache`
    as its (cold) build cache and `tmpdir` as TMPDIR; its variants' bytes and digests."""
    shutil.copytree(BUILD_KERNEL, root)
    cu = root / "templates" / "mini-kernel" / "csrc" / "cuda" / "scale.cu.j2"
    cu.write_text(cu.read_text() + ANONYMOUS_KERNEL)
    render_source(root)
    # Its own build cache (nothing compiled for one directory is reused by the other); only this
    # interpreter's torch (provisioned environments of the user's would add rows). A TMPDIR of its own, as a
    # batch system gives each job.
    tmpdir.mkdir(parents=True)
    env = dict(os.environ, GGML_VENDOR_BUILD_CACHE=str(cache), GGML_VENDOR_ENVS=str(envs), TMPDIR=str(tmpdir))
    res = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "build", "--json", "-j", "2", "-C", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["compiler_invocations"] > 0 and doc["cache_hits"] == 0, "not a clean build"
    return _variants(root, doc)


def test_the_package_built_clean_in_two_directories_is_byte_identical(tmp_path: Path) -> None:
    envs = tmp_path / "envs"
    first = _clean_build(tmp_path / "a" / "proj", tmp_path / "cache-a", envs, tmp_path / "tmp-a")
    second = _clean_build(
        tmp_path / "elsewhere" / "much" / "deeper" / "p", tmp_path / "cache-b", envs, tmp_path / "job-tmp-b"
    )
    assert first and set(first) == set(second)
    for name, (so, digest) in first.items():
        # The anonymous namespace is in what ships (its kernel's registered name): the comparison covers it.
        assert b"_GLOBAL__N__" in so, f"{name}: no anonymous-namespace name in the .so; the test checks nothing"
        other_so, other_digest = second[name]
        assert so == other_so, (
            f"{name}: the .so files differ in {sum(x != y for x, y in zip(so, other_so)) + abs(len(so) - len(other_so))} "
            "bytes"
        )
        assert digest == other_digest, f"{name}: metadata.json digests differ"
