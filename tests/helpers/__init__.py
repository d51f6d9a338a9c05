"""Helpers the tests import (tests/conftest.py holds only fixtures and the seal): the fixture upstreams
(fixture_repos), the local Hub and its fixture variants (hubserver), the GGUF reference (gguf_reference), the
GDN state-indexing flip (gdn_flip), machine checks (machine), the metallib writer (metallib_fixture), a zig
wrapper toolchain made at once (zig_toolchain), project edits and the demo's family source
(project), the forked kill-at-checkpoint child (kill) and child check scripts (script); and the paths the tests
read their data from."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS = REPO_ROOT / "tests"
FIXTURES = TESTS / "fixtures"  # the miniature kernel package (build_kernel), copied per test
GOLDEN = TESTS / "golden"  # rendered files checked byte for byte (GGML_VENDOR_UPDATE_GOLDEN=1 to accept)
BUILD_KERNEL = FIXTURES / "build_kernel"
# Where the miniature package's source is rendered, and its variants built, in a copy of it.
BUILD_KERNEL_OUT = Path("build") / "mini-kernel"
BUILD_KERNEL_SRC = BUILD_KERNEL_OUT / "src"


def copy_build_kernel(dest: Path) -> Path:
    """A copy of the miniature kernel package at `dest`, its source rendered into build/mini-kernel/src/ (what
    `ggml-vendor render` does before a build)."""
    import shutil

    from toolkit import render
    from toolkit.core import config

    shutil.copytree(BUILD_KERNEL, dest)
    render.execute(render.plan(config.load(dest)))
    return dest


def render_source(root: Path) -> Path:
    """Render `root`'s packages into build/<name>/src/ (after a copy that left build/ out)."""
    from toolkit import render
    from toolkit.core import config

    for view in config.load(root).selected(()):
        render.execute(render.plan(view))
    return root


def built_variants(root: Path) -> list[str]:
    """What build/mini-kernel/ holds besides the rendered source: the variants (and staging) a build left."""
    out = root / BUILD_KERNEL_OUT
    return sorted(p.name for p in out.iterdir() if p.name != "src") if out.is_dir() else []
