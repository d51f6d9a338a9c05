"""Two clean builds of the rendered package, in two directories, are the same bytes (issue 33 item 7): nvcc
names anonymous namespaces and the stubs of static kernels after a hash of the translation unit's real path,
which no -ffile-prefix-map reaches, so the executor compiles every CUDA source from a fixed path. Built for
real against the miniature upstream (the binding tests' build, plus a second one elsewhere with a cold cache);
skipped, with the reason, where nvcc or a CUDA build of torch is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import render_source
from tests.helpers.machine import binding_build_unavailable

pytestmark = pytest.mark.slow

_SKIP = binding_build_unavailable()
if _SKIP:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason=_SKIP)]


def _variants(root: Path, doc: dict) -> dict[str, tuple[bytes, dict]]:
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


def test_two_clean_builds_in_two_directories_are_byte_identical(built_binding, tmp_path):
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
