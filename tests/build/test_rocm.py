"""toolkit/build/rocm.py: HIP flags and the wavefront size each AMD arch compiles to (the ROCm steps of the
build plan are checked in tests/build/test_plan.py)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.machine import real_upstream_text
from toolkit.build import rocm
from toolkit.core import ggml_facts
from toolkit.core.errors import ConfigError


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
    text = real_upstream_text("src/ggml-cuda/common.cuh")
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
