"""The hermetic toolchain's wrapper (toolkit/build/zig.py), exercised with a stand-in `zig` that prints the
command it was given: the recipe's rules hold (dumpmachine answered, -fno-gnu-unique dropped, libstdc++
headers by -I, libgcc_s linked by path and never -lgcc_s), and the toolchain identity follows the recipe."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.fixture_repos import tiny_project_inputs
from tests.helpers.zig_toolchain import make_toolchain
from toolkit.build import zig as z

if not shutil.which("g++"):
    pytest.skip("g++ (the host's libstdc++ headers) is not installed", allow_module_level=True)

FAKE_ZIG = """#!/bin/sh
if [ "$1" = version ]; then echo 0.14.1; exit 0; fi
printf '%s\\n' "$@"
"""


@pytest.fixture()
def toolchain(tmp_path: Path) -> z.ZigToolchain:
    zig = tmp_path / "zig"
    zig.write_text(FAKE_ZIG)
    zig.chmod(0o755)
    return make_toolchain(str(zig), "x86_64", base=tmp_path / "toolchains")


def _run(tc: z.ZigToolchain, *args: str) -> list[str]:
    return subprocess.run([tc.cxx, *args], capture_output=True, text=True, check=True).stdout.splitlines()


def test_dumpmachine_is_answered_by_the_wrapper(toolchain: z.ZigToolchain) -> None:
    assert _run(toolchain, "-dumpmachine") == ["x86_64-linux-gnu"]


def test_compile_targets_glibc_228_with_libstdcxx_headers_and_drops_gcc_only_flags(toolchain: z.ZigToolchain) -> None:
    argv = _run(toolchain, "-c", "a.cpp", "-o", "a.o", "-fno-gnu-unique", "-fPIC")
    assert argv[:3] == ["c++", "-target", "x86_64-linux-gnu.2.28"]
    assert "-nostdinc++" in argv and "-fno-gnu-unique" not in argv
    assert argv[-5:] == ["-c", "a.cpp", "-o", "a.o", "-fPIC"]
    std = z.host_libstdcxx()
    for d in std.include_dirs:
        assert f"-I{d}" in argv  # -I, not -isystem (zig's libc dirs would come first)
    assert not any(a.startswith("-isystem") for a in argv)
    assert f"-I{toolchain.wrapper_dir}/shim" in argv
    assert (Path(toolchain.wrapper_dir) / "shim" / "sys" / "single_threaded.h").is_file()
    assert "-nostdlib++" not in argv  # compile only: no link inputs


def test_link_adds_libstdcxx_and_libgcc_s_by_path_never_lgcc_s(toolchain: z.ZigToolchain) -> None:
    argv = _run(toolchain, "-shared", "-o", "x.so", "a.o", "-ltorch")
    assert argv[-3:] == ["-nostdlib++", toolchain.libstdcxx, toolchain.libgcc_s]
    assert Path(argv[-1]).name == "libgcc_s.so.1"
    assert "-lgcc_s" not in argv


def test_identity_follows_zig_and_wrapper_content(tmp_path: Path, toolchain: z.ZigToolchain) -> None:
    again = make_toolchain(toolchain.zig, "x86_64", base=tmp_path / "toolchains")
    assert again.identity == toolchain.identity and again.wrapper_dir == toolchain.wrapper_dir
    other = tmp_path / "other" / "zig"
    other.parent.mkdir()
    shutil.copy2(toolchain.zig, other)
    moved = make_toolchain(str(other), "x86_64", base=tmp_path / "toolchains")
    assert moved.wrapper_sha256 != toolchain.wrapper_sha256 and moved.identity != toolchain.identity
    arm = make_toolchain(toolchain.zig, "aarch64", base=tmp_path / "toolchains")
    assert arm.target == "aarch64-linux-gnu.2.28" and arm.identity != toolchain.identity
    prov = toolchain.provenance()
    assert prov["zig"] == "0.14.1" and prov["wrapper-sha256"] == toolchain.wrapper_sha256
    assert "/" not in prov["libstdc++"]  # no local paths in published metadata


def test_planned_steps_carry_the_toolchain_identity_and_nvcc_ccbin(toolchain: z.ZigToolchain) -> None:
    from toolkit.build.envs import Toolkit
    from toolkit.build.host_status import Status
    from toolkit.build.matrix import parse_name
    from toolkit.build.steps import make_plan
    from toolkit.build.torchenvs import TorchEnv

    proj = tiny_project_inputs("torch-ext/b.cpp", "csrc/a.cu")
    env = TorchEnv("/py", "2.14.1+cu130", "/t", cuda="13.0", include_dirs=("/t/include",), lib_dir="/t/lib")
    tk = Toolkit("cuda", "13.0", "/cuda", "/cuda/bin/nvcc", "13.0.88")
    judged = [(parse_name("torch214-cxx11-cu130-x86_64-linux"), Status(True, "", "local", tk, env))]
    zplan = make_plan(proj, judged, cxx=toolchain.cxx, cxx_id=toolchain.identity, ccbin=toolchain.cxx)
    splan = make_plan(proj, judged, cxx="/usr/bin/g++", cxx_id="g++ 12")
    nvcc = next(s for s in zplan.steps.values() if s.tool == "nvcc")
    assert nvcc.argv[1:3] == ("-ccbin", toolchain.cxx) and toolchain.identity in nvcc.toolchain
    assert all(toolchain.identity in s.toolchain for s in zplan.steps.values())
    assert not set(zplan.steps) & set(splan.steps)  # nothing shared between toolchains: no stale cache hit
