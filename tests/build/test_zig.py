"""A real variant built with the hermetic toolchain (pinned zig targeting glibc 2.28, nvcc -ccbin through its
wrapper): manylinux_2_28 symbol versions whatever this host's glibc is, no private unwinder, an exception
thrown inside the extension reaches Python, the toolchain is recorded in the provenance, and switching
toolchains never reuses the other toolchain's objects. Needs nvcc, a CUDA torch and the pinned zig (the
`cuda` extra installs ziglang); skipped, with the reason, otherwise."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import copy_build_kernel
from tests.helpers.machine import local_cuda_build_unavailable
from toolkit.build.zig import ZIG_VERSION, find_zig

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "build_kernel"
pytestmark: pytest.MarkDecorator | list[pytest.MarkDecorator] = pytest.mark.slow


def _why_not() -> str | None:
    why = local_cuda_build_unavailable()
    if why:
        return why
    if find_zig() is None:
        return f"zig {ZIG_VERSION} is not installed (pip install ziglang=={ZIG_VERSION}, or build --provision)"
    if not shutil.which("objdump") or not shutil.which("g++"):
        return "binutils (objdump) or g++ (libstdc++ headers) missing"
    return None


_WHY_NOT = _why_not()
if _WHY_NOT:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason=_WHY_NOT)]


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "build", "-C", str(root), *args], capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def zig_built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Path]:
    root = tmp_path_factory.mktemp("zig") / "proj"
    copy_build_kernel(root)
    res = _cli(root, "--toolchain", "zig", "--json", "-j", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    [r] = doc["variants"]
    return root, r, root / r["out_dir"] / f"{r['id']}.abi3.so"


def _versions(so: Path) -> dict[str, tuple[int, ...]]:
    text = subprocess.run(["objdump", "-T", str(so)], capture_output=True, text=True, check=True).stdout
    top: dict[str, tuple[int, ...]] = {}
    for name, ver in re.findall(r"\b(GLIBC|GLIBCXX|CXXABI)_(\d+(?:\.\d+)*)\b", text):
        v = tuple(int(x) for x in ver.split("."))
        top[name] = max(top.get(name, v), v)
    return top


def test_symbol_versions_are_manylinux_2_28(zig_built: tuple[Path, dict[str, Any], Path]) -> None:
    _, _, so = zig_built
    top = _versions(so)
    assert top["GLIBC"] <= (2, 28), top
    assert top.get("GLIBCXX", (0,)) <= (3, 4, 25) and top.get("CXXABI", (0,)) <= (1, 3, 11), top


def test_no_private_unwinder_and_exceptions_reach_python(zig_built: tuple[Path, dict[str, Any], Path]) -> None:
    root, r, so = zig_built
    defined = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert "_Unwind_" not in defined  # libgcc_s linked by path, not zig's static libunwind
    code = (
        "import sys, torch\n"
        "torch.ops.load_library(sys.argv[1])\n"
        f"op = getattr(torch.ops, {r['id']!r}).scale\n"
        "try:\n    op(torch.ones(3, dtype=torch.float64), 2.0)\n"
        "except RuntimeError as e:\n    print('caught:', e)\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(so)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"exit {res.returncode}: {res.stderr[-800:]}"
    assert "caught:" in res.stdout and "contiguous float32 CUDA tensor" in res.stdout


def test_provenance_records_the_toolchain(zig_built: tuple[Path, dict[str, Any], Path]) -> None:
    root, r, _ = zig_built
    meta = json.loads((root / r["out_dir"] / "metadata.json").read_text())
    tc = meta["provenance"]["ggml-vendor"]["toolchain"]
    assert tc["kind"] == "zig" and tc["zig"] == ZIG_VERSION and tc["target"].endswith("-linux-gnu.2.28")
    assert len(tc["wrapper-sha256"]) == 64
    assert meta["provenance"]["ggml-vendor"]["toolkit"].startswith("cuda 13.")


def test_switching_toolchain_recompiles_and_switching_back_is_a_cache_hit(
    zig_built: tuple[Path, dict[str, Any], Path],
) -> None:
    root, _, _ = zig_built
    res = _cli(root, "--toolchain", "zig", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["compiler_invocations"] == 0
    plan = json.loads(_cli(root, "--toolchain", "system", "--dry-run", "--json").stdout)
    zplan = json.loads(_cli(root, "--toolchain", "zig", "--dry-run", "--json").stdout)
    assert plan["toolchain"]["kind"] == "system" and zplan["toolchain"]["kind"] == "zig"
    assert not set(plan["steps"]) & set(zplan["steps"])  # the system build cannot hit zig's cache entries
