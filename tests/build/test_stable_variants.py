"""The stable-ABI rows of the matrix, read by the installed kernels release (the suite runs under 0.17.2, 0.18.3 and
0.19.1 in CI): every client parses the name as a torch-stable-abi variant and picks it over a per-torch variant for
any torch from the floor on; under a torch below the floor it falls back to the per-torch variant."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from toolkit.build.binding_link import stable_source, torch_target_version
from toolkit.build.matrix import parse_matrix, parse_name
from toolkit.core.errors import ConfigError
from toolkit.core.kernels_client import client_version, parse_variant

ROOT = Path(__file__).resolve().parents[2]
STABLE = "torch-stable-abi210-cu130-x86_64-linux"


def _resolver() -> ModuleType:
    try:
        from kernels._internals import variants as kv
    except ImportError:
        from kernels import variants as kv
    module: ModuleType = kv
    return module


# The row the shipped matrices will carry once the stable binary passes verify (their comment says why not yet).
STABLE_ROW = (
    '[[build]]\nbackend = "cuda"\nabi = "stable"\ntorch = ["2.10"]\ntoolkits = ["12.6", "13.0", "13.2"]\n'
    'systems = ["x86_64-linux", "aarch64-linux"]\n'
)


@pytest.mark.parametrize("matrix", ["ggml-attn-kernels.toml", "gguf-kernels.toml"])
def test_one_stable_row_per_cuda_toolkit_and_system(matrix: str) -> None:
    text = (ROOT / "variants" / matrix).read_text()
    assert 'abi = "stable"' not in text.replace('#   abi = "stable"', ""), "the shipped matrix builds stable rows"
    at = text.index("\n[sources.torch]\n") + 1
    m = parse_matrix(text[:at] + STABLE_ROW + "\n" + text[at:], ROOT / "variants" / matrix)
    stable = [v for v in m.variants if v.stable]
    cuda = {(v.toolkit, v.system) for v in m.variants if v.backend == "cuda" and not v.stable}
    assert {(v.toolkit, v.system) for v in stable} == cuda
    assert {v.torch for v in stable} == {"2.10"} and all(v.backend == "cuda" for v in stable)
    assert all(parse_name(v.name) == v for v in stable)
    assert all(m.torch_source(v) is not None for v in stable if v.toolkit == "13.0")  # compiled with a listed torch


def test_the_installed_client_reads_the_stable_name() -> None:
    p = parse_variant(STABLE)
    assert (p.framework, p.framework_version, p.backend, p.backend_version, p.os) == (
        "torch-stable-abi",
        "2.10",
        "cuda",
        "13.0",
        "linux",
    ), client_version()


def _pick(torch: str, names: list[str]) -> str:
    """The variant the installed client's own resolver puts first for a Linux x86_64 host with CUDA 13.0 and that
    torch (kernels' `_resolve_variant_for_system`: the same in 0.17, 0.18 and 0.19, with the system made explicit)."""
    from packaging.version import Version

    kv = _resolver()
    cuda = kv.CUDA(version=Version("13.0"))
    by_parsed = {kv.parse_variant(n): n for n in names}
    chosen, trace = kv._resolve_variant_for_system(list(by_parsed), cuda, "x86_64", "linux", Version(torch), True, None)
    assert chosen, f"kernels {client_version()} accepted nothing under torch {torch}: {trace}"
    return by_parsed[chosen[0]]


def test_the_client_prefers_stable_from_the_floor_and_falls_back_below_it() -> None:
    per_torch = "torch{}-cxx11-cu130-x86_64-linux"
    names = [STABLE, per_torch.format("29"), per_torch.format("214")]
    assert _pick("2.14", names) == STABLE, client_version()  # the stable variant beats the exact per-torch one
    assert _pick("2.15", names) == STABLE, client_version()  # a torch minor we never built per-torch
    assert _pick("2.9", names) == per_torch.format("29"), client_version()  # below the floor: per-torch


def test_stable_rows_are_cuda_only() -> None:
    text = 'schema = 1\n[[build]]\nbackend = "rocm"\nabi = "stable"\ntorch = ["2.10"]\ntoolkits = ["7.2"]\n'
    text += 'systems = ["x86_64-linux"]\n'
    with pytest.raises(ConfigError, match="stable"):
        parse_matrix(text, Path("m.toml"))


def test_the_stable_build_compiles_the_twin_at_the_floor() -> None:
    assert stable_source("torch-ext/torch_binding.cpp") == "torch-ext/torch_binding_stable.cpp"
    assert torch_target_version("2.10") == "0x020A000000000000ULL"
