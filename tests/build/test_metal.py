"""The Metal build: which vendored Metal files build (toolkit/build/metal.py), the build's own Metal steps
(toolkit/build/steps.py), and embedding.

The Metal binary itself cannot be built on this (Linux) machine; the tests that would need it say so. What
runs here: the real plan's Metal command lines, the real local executor running them against a simulated
Xcode (the compile/link steps faked, the embed step run for real), and embedding checks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import metallib_fixture
from tests.helpers.machine import real_upstream_text
from toolkit.build import metal, metallib
from toolkit.build.host_status import Status
from toolkit.build.inputs import ProjectInputs
from toolkit.build.results import VariantResult
from toolkit.build.steps import BuildPlan
from toolkit.core import package_facts
from toolkit.core.errors import BuildError, VendorStateError
from toolkit.core.lock import Lock

# The first package's op facts over ggml's shared ones (templates/facts.py), as render sees them.
FACTS = package_facts.load(Path(__file__).resolve().parents[2] / "templates" / "ggml-attn-kernels", "ggml-attn-kernels")

REPO = Path(__file__).resolve().parents[2]

MONO = "src/ggml-metal/ggml-metal.metal"
IMPL = "src/ggml-metal/ggml-metal-impl.h"
COMMON = "src/ggml-common.h"


def make_lock(entries: dict[str, tuple[str, ...]], closures: dict[str, tuple[str, ...]]) -> Lock:
    return Lock(
        upstream="https://github.com/ggml-org/llama.cpp",
        layout="llama.cpp",
        commit="0" * 40,
        rev="master",
        date="2026-09-01T00:00:00+00:00",
        subject="test",
        tool_version="0.1.0",
        files={},
        entries={op: {"metal": e} for op, e in entries.items()},
        closures={op: {"metal": c} for op, c in closures.items()},
    )


PRE_SPLIT = make_lock(
    {"gated_delta_net": (MONO,), "flash_attn": (MONO,)},
    {"gated_delta_net": (MONO, IMPL, COMMON), "flash_attn": (MONO, IMPL, COMMON)},
)
POST_SPLIT = make_lock(
    {
        "gated_delta_net": ("src/ggml-metal/kernels/gated_delta_net.metal",),
        "flash_attn": ("src/ggml-metal/kernels/fa.metal",),
    },
    {
        "gated_delta_net": ("src/ggml-metal/kernels/gated_delta_net.metal", "src/ggml-metal/kernels/common.h", IMPL),
        "flash_attn": (
            "src/ggml-metal/kernels/fa.metal",
            "src/ggml-metal/kernels/common.h",
            "src/ggml-metal/kernels/dequantize.h",
            IMPL,
            COMMON,
        ),
    },
)

LINUX = metal.MetalHost("Linux", "x86_64", None, None, None, None)
MAC = metal.MetalHost("Darwin", "arm64", "26.1", "/usr/bin/xcrun", "/x/metal", "/x/metallib")


def test_sources_for_both_layouts() -> None:
    pre = metal.metal_sources(PRE_SPLIT)
    assert pre.layout == metal.LAYOUT_MONOLITH
    assert pre.entries == (MONO,)  # one entry serves both ops
    assert pre.headers == (IMPL, COMMON)
    post = metal.metal_sources(POST_SPLIT)
    assert post.layout == metal.LAYOUT_SPLIT
    assert post.entries == ("src/ggml-metal/kernels/gated_delta_net.metal", "src/ggml-metal/kernels/fa.metal")
    assert post.headers == ("src/ggml-metal/kernels/common.h", IMPL, "src/ggml-metal/kernels/dequantize.h", COMMON)


def test_sources_refuse_what_cannot_build() -> None:
    with pytest.raises(VendorStateError, match="no lock"):
        metal.metal_sources(None)  # type: ignore[arg-type]  # the missing lock under test
    with pytest.raises(VendorStateError, match="pins no Metal sources"):
        metal.metal_sources(make_lock({}, {}))
    with pytest.raises(VendorStateError, match="neither"):
        metal.metal_sources(make_lock({"gated_delta_net": ("src/other/x.metal",)}, {}))
    assert metal.detect_layout(["src/ggml-metal/kernels/fa.metal", MONO]) == metal.LAYOUT_SPLIT
    assert metal.detect_layout([IMPL]) is None


def test_required_kernels_follow_the_facts() -> None:
    names = metal.required_kernels(["gated_delta_net"], FACTS)
    assert names == ("kernel_gated_delta_net_f32_1", "kernel_gated_delta_net_f32_2", "kernel_gated_delta_net_f32_4")
    fa = metal.required_kernels(["flash_attn"], FACTS)
    assert "kernel_flash_attn_ext_vec_reduce" in fa and "kernel_flash_attn_ext_pad" in fa
    assert "kernel_flash_attn_ext_vec_bf16_dk576_dv512" in fa and "kernel_flash_attn_ext_vec_f16_dk128_dv128" in fa
    assert len(fa) == len(FACTS.METAL_FA_VEC_HEAD_DIMS) * len(FACTS.METAL_FA_VEC_KV_TYPES) + 2
    assert metal.required_kernels([], FACTS) == ()


@pytest.mark.real_upstream
def test_required_kernels_exist_in_the_real_monolith() -> None:
    """Every name the binding may dispatch is a host_name in ggml-metal.metal at the snapshot."""
    text = real_upstream_text(MONO)
    host_names = set(re.findall(r'host_name\("([A-Za-z0-9_]+)"\)', text))
    plain = set(re.findall(r"^kernel void (kernel_flash_attn_ext_(?:vec_reduce|pad))\(", text, re.M))
    missing = [
        n for n in metal.required_kernels(["gated_delta_net", "flash_attn"], FACTS) if n not in host_names | plain
    ]
    assert missing == []


# --- the real build's Metal steps (toolkit/build/steps.py; the local executor runs them) -------------------

METAL_ROW = "torch214-metal-aarch64-darwin"


def _metal_inputs(root: Path) -> ProjectInputs:
    """The ProjectInputs of this repository's own [kernel.ggml_metal] section (build.toml as rendered)."""
    import tomlkit

    from toolkit import render
    from toolkit.build.inputs import _kernel_sections
    from toolkit.core import config

    text = render.plan(config.load(REPO)).by_path()["build.toml"].content  # this repository's first package
    text = text.replace('"../../../vendor/', '"vendor/')  # laid out here with vendor/ beside it (as Nix stages it)
    doc = tomlkit.parse(text).unwrap()
    sections = tuple(k for k in _kernel_sections(doc) if k.backend == "metal")
    assert sections, "build.toml has no metal section"
    return ProjectInputs(
        root=root,
        name="mini",
        module="mini",
        version=1,
        license="MIT",
        upstream=None,
        backends=("metal",),
        torch_src=("torch-ext/torch_binding.cpp",),
        torch_include=(),
        torch_cxx_flags=(),
        kernels=sections,
        python_files=("__init__.py", "_ops.py"),
        source_id="ab" * 32,
    )


def _metal_plan(root: Path, status: Status | None = None) -> BuildPlan:
    from toolkit.build.host_status import Status
    from toolkit.build.matrix import parse_name
    from toolkit.build.steps import make_plan

    st = status or Status(False, "needs macOS on Apple silicon with Xcode 26 and the Metal toolchain")
    return make_plan(_metal_inputs(root), [(parse_name(METAL_ROW), st)], cxx="c++", cxx_id="g++", gen_include="/gen")


def test_the_builds_metal_compile_line(tmp_path: Path) -> None:
    """What kernel-builder runs (docs/hub-contract.md §4.7), as the build's own plan has it."""
    plan = _metal_plan(tmp_path)
    steps = {s.tool: s for s in plan.steps.values()}
    air = steps["metal"].argv
    assert air[:4] == ("xcrun", "-sdk", "macosx", "metal")
    assert "-std=metal4.0" in air and "-O2" in air and "-mmacosx-version-min=26.0" in air
    assert air[air.index("-c") + 1] == "csrc/metal/ggml_metal_kernels.metal"
    assert [a[2:] for a in air if a.startswith("-I")] == ["vendor/ggml/src", "vendor/ggml/src/ggml-metal", "csrc/metal"]
    assert not any(a.startswith("-D") for a in air)  # EMBED_LIBRARY / HAS_TENSOR never defined
    lib, embed = steps["metallib"], steps["python"]
    assert lib.after == (steps["metal"].id,) and lib.argv[3] == "metallib"
    assert embed.after == (lib.id,) and embed.argv[1:4] == ("-m", "toolkit.build.metal", "embed")
    ops_id = plan.variants[0].ops_id
    assert embed.argv[-1] == f"{ops_id}_metal" and embed.output == f"{ops_id}_metallib.h"
    mm = [s for s in plan.steps.values() if s.label.startswith("c++ csrc/metal/") and s.label.endswith(".mm")]
    assert len(mm) == 3
    for s in mm:  # each host object waits for the header and finds it by kernel-builder's names
        assert embed.id in s.after and f'-DEMBEDDED_METALLIB_HEADER="{ops_id}_metallib.h"' in s.argv
        assert f"-DEMBEDDED_METALLIB_NAMESPACE={ops_id}_metal" in s.argv and "-fobjc-arc" in s.argv
    assert not any(s.runnable for s in plan.steps.values())  # planned here, run on a Mac


def test_metal_rows_off_a_mac_say_why_not() -> None:
    from toolkit.build.envs import HostFacts
    from toolkit.build.host_status import status
    from toolkit.build.matrix import parse_name

    linux = status(parse_name(METAL_ROW), HostFacts("linux", "x86_64"), enabled_backends=("metal",), index="PyPI")
    assert not linux.buildable and "needs macOS on Apple silicon" in linux.reason and "x86_64-linux" in linux.reason
    mac = status(parse_name(METAL_ROW), HostFacts("darwin", "aarch64"), enabled_backends=("metal",), index="PyPI")
    assert not mac.buildable and "downloadComponent MetalToolchain" in mac.reason


FAKE_XCRUN = """#!/bin/sh
echo "xcrun $3" >> "$CALLS"
out=""; prev=""
for a do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
if [ "$3" = metallib ]; then cp "$FIXTURE_METALLIB" "$out"; else printf air > "$out"; fi
"""
FAKE_CXX = """#!/bin/sh
echo "c++ $*" >> "$CALLS"
out=""; prev=""
for a do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
printf obj > "$out"
"""


def simulated_xcode_project(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Metal project under base/proj with fixture sources, and a simulated Xcode (xcrun, clang++) first on
    PATH whose calls are logged to base/calls; its metallib step hands out a fixture metallib."""
    root = base / "proj"
    for sec in _metal_inputs(root).kernels:
        for rel in (*sec.src, "torch-ext/torch_binding.cpp"):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("// fixture\n")
    (root / "torch-ext" / "mini").mkdir()
    (root / "torch-ext" / "mini" / "__init__.py").write_text("from ._ops import ops\n")
    (root / "torch-ext" / "mini" / "_ops.py").write_text("import torch\nops = torch.ops.@OPS_NAME@\n")
    bindir = base / "bin"
    bindir.mkdir()
    for name, body in (("xcrun", FAKE_XCRUN), ("clang++", FAKE_CXX)):
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    fixture = base / "fixture.metallib"
    fixture.write_bytes(
        metallib_fixture.build_fixture(metal.required_kernels(["gated_delta_net", "flash_attn"], FACTS))
    )
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FIXTURE_METALLIB", str(fixture))
    monkeypatch.setenv("CALLS", str(base / "calls"))
    return root


def run_local_build(root: Path, cache: Path, *, jobs: int) -> VariantResult:
    """One run of the real local executor on the project's Metal plan (steps through the cache, the variant
    assembled into build/); asserts it built and returns its result."""
    from toolkit.build.cache import BuildCache
    from toolkit.build.host_status import Status
    from toolkit.build.inputs import read_provenance
    from toolkit.build.local import LocalExecutor
    from toolkit.build.torchenvs import TorchEnv

    env = TorchEnv(
        "/py", "2.14.1", "/t/torch", include_dirs=("/t/include",), lib_dir="/t/lib", python_include="/py/inc"
    )
    plan = _metal_plan(root, Status(True, "", "local", None, env))
    ex = LocalExecutor(
        plan,
        BuildCache(cache, root),
        jobs=jobs,
        provenance=read_provenance(root),
        log_dir=cache / "logs",
        gen_dir=cache / "gen",
        progress=False,
    )
    [res] = ex.run(plan.buildable())
    assert res.result == "built", (res.reason, res.tail)
    return res


def test_the_local_executor_runs_the_metal_steps_against_a_simulated_xcode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real executor on the real plan: compile and link simulated (no Metal compiler here), the embed step
    run for real on a fixture metallib, the variant assembled into build/."""
    root = simulated_xcode_project(tmp_path, monkeypatch)
    res = run_local_build(root, tmp_path / "cache", jobs=2)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls.index("xcrun metal") < calls.index("xcrun metallib")
    assert [c.split()[0] for c in calls].count("c++") == 5  # three .mm, the binding, the link
    out = root / res.out_dir
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["__init__.py", "_ops.py", "metadata.json", f"{res.id}.abi3.so"]
    )
    assert res.id in (out / "_ops.py").read_text()


def test_embed_refuses_non_metallibs_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "bad.metallib").write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n")
    header = tmp_path / "h" / "x_metallib.h"
    with pytest.raises(metallib.MetallibError):
        metal.embed_metallib(tmp_path / "bad.metallib", header, "x_metal")
    assert not header.exists()
    (tmp_path / "few.metallib").write_bytes(metallib_fixture.build_fixture(["kernel_gated_delta_net_f32_1"]))
    with pytest.raises(BuildError, match="lacks 2 kernel"):
        metal.embed_metallib(
            tmp_path / "few.metallib", header, "x_metal", required=metal.required_kernels(["gated_delta_net"], FACTS)
        )
    assert not header.exists() and list((tmp_path / "h").glob("*")) == []


def test_embed_cli(tmp_path: Path) -> None:
    lib = tmp_path / "a.metallib"
    lib.write_bytes(metallib_fixture.build_fixture(["k1", "k2"]))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ok = subprocess.run(
        [sys.executable, "-m", "toolkit.build.metal", "embed", str(lib), str(tmp_path / "a.h"), "a_metal"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ok.returncode == 0 and "embedded 2 functions" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "toolkit.build.metal", "embed", str(tmp_path / "a.h"), str(tmp_path / "b.h"), "b_metal"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1
    usage = subprocess.run([sys.executable, "-m", "toolkit.build.metal"], capture_output=True, text=True, env=env)
    assert usage.returncode == 2


def test_header_source_is_deterministic_and_exact() -> None:
    data = bytes(range(40))
    a = metal.header_source(data, "n_metal", source_name="n.metallib")
    assert a == metal.header_source(data, "n_metal", source_name="n.metallib")
    body = a[a.index("metallib_data[] = {") + len("metallib_data[] = {") : a.index("};")]
    assert bytes(int(x, 16) for x in re.findall(r"0x([0-9a-f]{2})", body)) == data
    with pytest.raises(BuildError):
        metal.header_source(data, "not a namespace")
