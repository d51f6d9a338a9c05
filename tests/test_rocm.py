"""toolkit/build/rocm.py: HIP flags, the wavefront size each AMD arch compiles to, and the ROCm build plan.

No ROCm toolchain exists here (no hipcc, no ROCm torch): the plan is checked as data and its blockers say
so; the ROCm objects themselves are not built on this machine."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from toolkit.build import rocm
from toolkit.core import ggml_facts
from toolkit.core.errors import BuildError, ConfigError

MIRROR = Path("/work/.mirror/ggml-org+ggml/repo")
NO_ROCM = rocm.RocmHost(None, None, None)
ROCM72 = rocm.RocmHost("/opt/rocm/bin/hipcc", "7.2", "7.2.53211")


@pytest.mark.parametrize(
    "arch, size",
    [
        ("gfx906", 64),
        ("gfx908", 64),
        ("gfx90a", 64),
        ("gfx942", 64),
        ("gfx950", 64),
        ("gfx803", 64),
        ("gfx1030", 32),
        ("gfx1100", 32),
        ("gfx1101", 32),
        ("gfx1151", 32),
        ("gfx1200", 32),
        ("gfx1201", 32),
        ("gfx90a:sramecc+:xnack-", 64),
        ("GFX1100", 32),
    ],
)
def test_warp_size_per_arch(arch: str, size: int) -> None:
    assert rocm.warp_size(arch) == size


@pytest.mark.parametrize("bad", ["sm_90", "gfx7", "gfx1300", "rdna3", ""])
def test_warp_size_refuses_unknown_archs(bad: str) -> None:
    with pytest.raises(ConfigError):
        rocm.warp_size(bad)


def test_every_kernel_builder_arch_has_a_warp_size() -> None:
    sizes = {a: rocm.warp_size(a) for a in ggml_facts.ROCM_ARCHS}
    assert {a for a, s in sizes.items() if s == 64} == {"gfx906", "gfx908", "gfx90a", "gfx942", "gfx950"}


@pytest.mark.real_upstream
def test_warp_rule_matches_ggml_common_cuh() -> None:
    """The rule in facts is the one ggml compiles: 64 exactly under __GFX9__ / __GFX8__ with GGML_USE_HIP."""
    if not (MIRROR / "HEAD").is_file():
        pytest.skip("no ggml snapshot mirror on this machine")
    text = subprocess.run(
        ["git", "-C", str(MIRROR), "show", "HEAD:src/ggml-cuda/common.cuh"], capture_output=True, text=True, check=True
    ).stdout
    body = text[text.index("ggml_cuda_get_physical_warp_size()") :]
    body = body[: body.index("\n}\n")]
    assert re.search(
        r"#if defined\(GGML_USE_HIP\) && \(defined\(__GFX9__\) \|\| defined\(__GFX8__\)\)\s*return 64;"
        r"\s*#else\s*return 32;",
        body,
    ), body
    wave64 = {p for p, s in ggml_facts.HIP_WARP_SIZE_BY_PREFIX if s == 64}
    assert wave64 == {"gfx8", "gfx9"}


def test_validate_archs() -> None:
    assert rocm.validate_archs(["gfx942", "gfx942:xnack-", "gfx1100"]) == ("gfx942", "gfx1100")
    with pytest.raises(ConfigError, match="not in kernel-builder's HIP list"):
        rocm.validate_archs(["gfx1151"])
    with pytest.raises(ConfigError, match="no ROCm archs"):
        rocm.validate_archs([])


def test_hip_flags_keep_warp_size_and_math() -> None:
    flags = rocm.hip_flags()
    assert "-DGGML_USE_HIP" in flags
    assert "-U__HIP_NO_HALF_OPERATORS__" in flags and "-U__HIP_NO_HALF_CONVERSIONS__" in flags
    assert not set(flags) & set(ggml_facts.HIP_FORBIDDEN_FLAGS)
    for bad in ("-mwavefrontsize64", "-ffast-math"):
        with pytest.raises(ConfigError, match=re.escape(bad)):
            rocm.hip_flags([bad])


def _sources(root: Path) -> list[str]:
    srcs = [
        "csrc/cuda/gdn_kernels.cu",
        "csrc/cuda/fa_vec_kernels.cu",
        "csrc/cuda/ggml_shim.cu",
        "csrc/cuda/ggml_launchers.h",
    ]
    for s in srcs:
        (root / s).parent.mkdir(parents=True, exist_ok=True)
        (root / s).write_text("// fixture\n")
    return srcs


def test_plan_where_rocm_exists(tmp_path: Path) -> None:
    srcs = _sources(tmp_path)
    incs = ["vendor/ggml/include", "vendor/ggml/src", "vendor/ggml/src/ggml-cuda"]
    p = rocm.plan(tmp_path, srcs, incs, tmp_path / "out", rocm_version="7.2", archs=["gfx942", "gfx1100"], host=ROCM72)
    assert p.buildable, p.blockers
    assert [s.name for s in p.steps] == [
        "hipcc csrc/cuda/gdn_kernels.cu",
        "hipcc csrc/cuda/fa_vec_kernels.cu",
        "hipcc csrc/cuda/ggml_shim.cu",
    ]  # headers are not compiled
    argv = p.steps[0].argv
    assert argv[:4] == ("/opt/rocm/bin/hipcc", "-x", "hip", "-c")
    assert "--offload-arch=gfx942" in argv and "--offload-arch=gfx1100" in argv
    assert "-DGGML_USE_HIP" in argv and f"-I{tmp_path.resolve() / 'vendor/ggml/src/ggml-cuda'}" in argv
    assert p.env == {"PYTORCH_ROCM_ARCH": "gfx942;gfx1100"}
    assert p.warp_sizes == {"gfx942": 64, "gfx1100": 32}
    assert any("gfx1100: compiled wave32" in n for n in p.notes)
    assert p.to_dict()["warp_sizes"]["gfx942"] == 64


def test_plan_here_is_reported_not_built(tmp_path: Path) -> None:
    srcs = _sources(tmp_path)
    p = rocm.plan(tmp_path, srcs, [], tmp_path / "out", rocm_version="7.1", host=NO_ROCM)
    assert not p.buildable
    assert p.archs == ggml_facts.ROCM_ARCHS
    assert any("needs ROCm 7.1 (hipcc on PATH" in b for b in p.blockers)
    assert any("needs a ROCm build of torch" in b for b in p.blockers)
    with pytest.raises(BuildError, match="cannot build the ROCm objects here"):
        rocm.execute(p)
    wrong = rocm.RocmHost("/usr/bin/hipcc", "6.4", "6.4.1")
    blockers = rocm.plan(tmp_path, srcs, [], tmp_path, rocm_version="7.2", host=wrong).blockers
    assert "hipcc here is HIP 6.4" in blockers[0] and "torch is for ROCm 6.4.1" in blockers[1]
    missing = rocm.plan(tmp_path, ["csrc/cuda/nope.cu"], [], tmp_path, rocm_version="7.2", host=ROCM72).blockers
    assert "is not rendered" in missing[0]
    with pytest.raises(ConfigError, match="MAJOR.MINOR"):
        rocm.plan(tmp_path, srcs, [], tmp_path, rocm_version="7", host=ROCM72)


def test_probe_host_reads_hipcc_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/opt/rocm/bin/hipcc" if name == "hipcc" else None)

    def fake(argv, **kw):
        return subprocess.CompletedProcess(argv, 0, "HIP version: 7.2.53211-abc\nAMD clang version 20\n", "")

    host = rocm.probe_host("7.2.1", run=fake)
    assert host == rocm.RocmHost("/opt/rocm/bin/hipcc", "7.2", "7.2.1")
    assert host.blockers("7.2") == ()


def test_execute_runs_hipcc_steps(tmp_path: Path) -> None:
    srcs = _sources(tmp_path)
    p = rocm.plan(tmp_path, srcs, [], tmp_path / "out", rocm_version="7.2", archs=["gfx90a"], host=ROCM72)
    seen = []

    def fake(argv, **kw):
        seen.append(argv)
        Path(argv[argv.index("-o") + 1]).write_bytes(b"obj")
        return subprocess.CompletedProcess(argv, 0, "", "")

    outs = rocm.execute(p, run=fake)
    assert len(outs) == 3 and all(o.is_file() for o in outs)

    def broken(argv, **kw):
        return subprocess.CompletedProcess(argv, 1, "", "error: use of undeclared identifier '__shfl_xor_sync'\n")

    with pytest.raises(BuildError, match="__shfl_xor_sync"):
        rocm.execute(p, run=broken)


@pytest.mark.skipif(
    shutil.which("hipcc") is None,
    reason="no ROCm toolchain (hipcc) on this host: ROCm objects are planned and reported, not built",
)
def test_hipcc_compiles_a_wave_probe(tmp_path: Path) -> None:  # pragma: no cover - needs ROCm
    src = tmp_path / "probe.cu"
    src.write_text("#include <hip/hip_runtime.h>\n__global__ void k(int * o) { o[0] = warpSize; }\n")
    p = rocm.plan(
        tmp_path,
        ["probe.cu"],
        [],
        tmp_path / "out",
        rocm_version=rocm.probe_host().hip_version or "0.0",
        archs=["gfx942"],
        host=rocm.probe_host("0.0"),
    )
    steps = [s for s in p.steps]
    res = subprocess.run(list(steps[0].argv), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
