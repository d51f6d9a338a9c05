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
