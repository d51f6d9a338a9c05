"""Cross-built aarch64 CUDA rows on an x86_64 host (zig's aarch64 target, the aarch64 torch wheel and
libcudart from PyPI, the aarch64 libstdc++ of Debian's cross package): the status rules, the plan's tools and
the wrapper, all without compiling (HostFacts and the toolchain are constructed)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fixture_repos import tiny_project_inputs
from tests.helpers.zig_toolchain import make_toolchain
from toolkit.build import zig as z
from toolkit.build.envs import HostFacts, Toolkit
from toolkit.build.host_status import Status, status
from toolkit.build.matrix import Source, parse_name
from toolkit.build.provision import cross_platform, cudart_install, torch_install
from toolkit.build.torchenvs import TorchEnv

NVCC = Toolkit("cuda", "13.0", "/tk", "/tk/bin/nvcc", "13.0.88", ("sm_80", "sm_90"))
HOST_TORCH = TorchEnv("/py", "2.14.1+cu130", "/site/torch", cuda="13.0")
ARM_TORCH = TorchEnv("", "2.14.1+cu130", "/envs/torch214-cu130-aarch64/torch", cuda="13.0", managed=True, cpu="aarch64")
ROW = "torch214-cxx11-cu130-aarch64-linux"


def _host(**kw: Any) -> HostFacts:
    base: dict[str, Any] = dict(os="linux", cpu="x86_64", toolkits=(NVCC,), envs=(HOST_TORCH,), cross_cpus=("aarch64",))
    base.update(kw)
    return HostFacts(**base)


def _st(host: HostFacts, **kw: Any) -> Status:
    return status(parse_name(ROW), host, enabled_backends=("cuda",), index="PyPI", **kw)


def test_without_a_cross_toolchain_the_row_needs_an_arm64_host_and_says_what_would_help() -> None:
    st = _st(_host(cross_cpus=()))
    assert not st.buildable and "needs an aarch64 host" in st.reason and "libstdc++-12-dev-arm64-cross" in st.reason


def test_cross_row_is_buildable_with_the_aarch64_torch_tree_and_cudart() -> None:
    host = _host(envs=(HOST_TORCH, ARM_TORCH), cudart={"aarch64-13.0": "/tc/cudart-13.0.3-aarch64/nvidia/cu13/lib"})
    st = _st(host)
    assert st.buildable and st.env == ARM_TORCH  # never the host's x86_64 torch of the same version
    assert st.toolkit is not None
    assert st.toolkit.compiler == "/tk/bin/nvcc" and st.toolkit.cudart_dir.endswith("aarch64/nvidia/cu13/lib")


def test_cross_row_provisions_torch_and_cudart_from_sources() -> None:
    st = _st(
        _host(),
        torch_source=Source("torch", "2.14.1"),
        toolkit_source=Source("cuda-toolkit[nvcc,cccl,cudart]", "13.0.3"),
    )
    assert [k for k, _ in st.provision] == ["cudart", "torch"]
    assert "torch 2.14.1 (cu130, aarch64)" in st.reason and "libcudart 13.0.3 (aarch64)" in st.reason


def test_cross_installs_use_the_target_platform_tags() -> None:
    t = torch_install("2.14", "cu130", "2.14.1", "pypi", Path("/envs"), cpu="aarch64")
    assert t.path == Path("/envs/torch214-cu130-aarch64") and not t.venv and t.no_deps
    cmd = t.commands(Path("/stage"))[0]
    assert "--only-binary=:all:" in cmd and cmd.count("--platform") == len(cross_platform("aarch64"))
    assert "manylinux_2_28_aarch64" in cmd and "manylinux2014_aarch64" in cmd  # pip does not widen a tag
    c = cudart_install("13.0.3", "aarch64", "pypi", Path("/tc"))
    assert c.requirement == "cuda-toolkit[cudart]==13.0.3" and c.path == Path("/tc/cudart-13.0.3-aarch64")


def test_cross_libstdcxx_is_found_in_the_debian_cross_layout(tmp_path: Path) -> None:
    assert z.cross_libstdcxx("aarch64", tmp_path) is None
    inc = tmp_path / "aarch64-linux-gnu" / "include" / "c++" / "12"
    (inc / "aarch64-linux-gnu").mkdir(parents=True)
    (inc / "backward").mkdir()
    lib = tmp_path / "aarch64-linux-gnu" / "lib"
    lib.mkdir()
    (lib / "libstdc++.so.6").write_text("")
    (lib / "libgcc_s.so.1").write_text("")
    std = z.cross_libstdcxx("aarch64", tmp_path)
    assert std is not None
    assert std.version == "12" and std.include_dirs == (str(inc), str(inc / "aarch64-linux-gnu"), str(inc / "backward"))
    assert std.libgcc_s.endswith("libgcc_s.so.1")


def test_aarch64_wrapper_targets_aarch64_and_drops_m64(tmp_path: Path) -> None:
    zig = tmp_path / "zig"
    zig.write_text('#!/bin/sh\nif [ "$1" = version ]; then echo 0.14.1; exit 0; fi\nprintf \'%s\\n\' "$@"\n')
    zig.chmod(0o755)
    std = z.LibStdCxx("", "12", ("/x/c++/12",), "/x/libstdc++.so.6", "/x/libgcc_s.so.1")
    tc = make_toolchain(str(zig), "aarch64", base=tmp_path / "tc", std=std)
    out = subprocess.run([tc.cxx, "-m64", "-c", "a.cpp"], capture_output=True, text=True, check=True).stdout.split()
    assert out[:3] == ["c++", "-target", "aarch64-linux-gnu.2.28"] and "-m64" not in out
    dm = subprocess.run([tc.cxx, "-dumpmachine"], capture_output=True, text=True, check=True).stdout.strip()
    assert dm == "aarch64-linux-gnu"


def test_plan_uses_the_cross_toolchain_and_the_target_cudart(tmp_path: Path) -> None:
    from dataclasses import replace

    from toolkit.build.host_status import Status
    from toolkit.build.steps import make_plan

    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcudart.so.13").write_text("")
    proj = tiny_project_inputs()
    env = replace(ARM_TORCH, include_dirs=("/t/include",), lib_dir="/t/lib")
    tk = replace(NVCC, cudart_dir=str(lib))
    judged = [(parse_name(ROW), Status(True, "", "local", tk, env))]
    cross = {"aarch64": ("/w-arm/clang++", "zig arm id", "/w-arm/clang++", {"kind": "zig", "target": "aarch64"})}
    plan = make_plan(proj, judged, cxx="/w-x86/clang++", cxx_id="zig x86 id", ccbin="/w-x86/clang++", cross=cross)
    nvcc = next(s for s in plan.steps.values() if s.tool == "nvcc")
    link = next(s for s in plan.steps.values() if s.kind == "link")
    assert nvcc.argv[1:3] == ("-ccbin", "/w-arm/clang++") and "zig arm id" in nvcc.toolchain
    assert link.argv[0] == "/w-arm/clang++" and str(lib / "libcudart.so.13") in link.argv
    assert plan.toolchains[ROW]["target"] == "aarch64"


@pytest.mark.parametrize("cpu", ["aarch64"])
def test_platform_tags_stop_at_manylinux_2_28(cpu: str) -> None:
    tags = cross_platform(cpu)
    assert tags[0] == f"manylinux_2_28_{cpu}" and not any("2_3" in t for t in tags)


# --- issue 20 item 1: a system toolkit's headers are laid out per target CPU --------------------------------

SYSTEM_NVCC = Toolkit("cuda", "13.0", "/usr/local/cuda", "/usr/local/cuda/bin/nvcc", "13.0.88", cpus=("x86_64",))
PYPI_NVCC = Toolkit("cuda", "13.0", "/tc/cuda-13.0.3/nvidia/cu13", "/tc/cuda-13.0.3/nvidia/cu13/bin/nvcc", "13.0.88")
SOURCES: dict[str, Any] = dict(
    torch_source=Source("torch", "2.14.1"), toolkit_source=Source("cuda-toolkit[nvcc,cccl,cudart]", "13.0.3")
)


def _fake_toolkit(root: Path, profile: str, targets: tuple[str, ...]) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "nvcc.profile").write_text(profile)
    for t in targets:
        (root / "targets" / t / "include").mkdir(parents=True)
        (root / "targets" / t / "include" / "cuda_runtime.h").write_text("")
    return root


def test_toolkit_cpus_follow_the_layout_nvcc_profile_reads(tmp_path: Path) -> None:
    from toolkit.build.envs import toolkit_cpus

    system = _fake_toolkit(tmp_path / "sys", 'INCLUDES += "-I$(TOP)/$(_TARGET_DIR_)/include"\n', ("x86_64-linux",))
    both = _fake_toolkit(
        tmp_path / "both", 'INCLUDES += "-I$(TOP)/$(_TARGET_DIR_)/include"\n', ("x86_64-linux", "sbsa-linux")
    )
    flat = _fake_toolkit(tmp_path / "flat", 'INCLUDES += "-I$(TOP)/include"\n', ())
    assert toolkit_cpus(system) == ("x86_64",)
    assert toolkit_cpus(both) == ("x86_64", "aarch64")
    assert toolkit_cpus(flat) == ()  # any CPU
    assert not Toolkit("cuda", "13.0", "/s", "/s/bin/nvcc", cpus=("x86_64",)).targets("aarch64")


def test_cross_row_with_only_a_system_toolkit_provisions_the_pypi_toolkit_not_just_cudart() -> None:
    st = _st(_host(toolkits=(SYSTEM_NVCC,)), **SOURCES)
    assert [k for k, _ in st.provision] == ["toolkit", "cudart", "torch"], st
    # the x86_64 row of the same host keeps the system toolkit
    x86 = status(
        parse_name(ROW.replace("aarch64", "x86_64")),
        _host(toolkits=(SYSTEM_NVCC,)),
        enabled_backends=("cuda",),
        index="PyPI",
        **SOURCES,
    )
    assert x86.buildable and x86.toolkit == SYSTEM_NVCC


def test_cross_row_builds_with_the_provisioned_toolkit_beside_the_system_one() -> None:
    host = _host(
        toolkits=(SYSTEM_NVCC, PYPI_NVCC),
        envs=(HOST_TORCH, ARM_TORCH),
        cudart={"aarch64-13.0": "/tc/cudart-13.0.3-aarch64/nvidia/cu13/lib"},
    )
    st = _st(host, **SOURCES)
    assert st.buildable and st.toolkit is not None and st.toolkit.compiler == PYPI_NVCC.compiler, st


def test_cross_row_without_sources_names_the_header_layout() -> None:
    st = _st(_host(toolkits=(SYSTEM_NVCC,)))
    assert not st.buildable and "whose headers serve aarch64" in st.reason, st.reason


def test_what_variants_lists_is_what_provisioning_installs() -> None:
    from toolkit.build.provision import installs_for

    st = _st(_host(toolkits=(SYSTEM_NVCC,)), **SOURCES)
    items = installs_for(parse_name(ROW), st.provision, "x86_64", Path("/envs"), Path("/tc"))
    assert [i.requirement for i in items] == [
        "cuda-toolkit[nvcc,cccl,cudart]==13.0.3",
        "cuda-toolkit[cudart]==13.0.3",
        "torch==2.14.1,!=2.14.1+cpu",
    ]
    assert items[0].path == Path("/tc/cuda-13.0.3") and items[1].platform and items[2].platform
    assert "for aarch64" in items[1].words and "for aarch64" not in items[0].words
