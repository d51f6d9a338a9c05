"""toolkit/build/metal.py: which vendored Metal files build, the metallib build plan, and embedding.

The Metal binary itself cannot be built on this (Linux) machine; the tests that would need it say so. What
runs here: the plan as data (commands, inputs, outputs, blockers), the plan executed against a simulated
Xcode (the compile/link steps faked, the embed step run for real), and embedding checks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import real_upstream_text

from toolkit.build import metal, metallib
from toolkit.core import package_facts
from toolkit.core.errors import BuildError, VendorStateError
from toolkit.core.lock import Lock

# The first package's op facts over ggml's shared ones (templates/facts.py), as render sees them.
FACTS = package_facts.load(Path(__file__).resolve().parents[1] / "templates", "ggml-attn-kernels")

REPO = Path(__file__).resolve().parents[1]

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
        metal.metal_sources(None)
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


def _project(tmp_path: Path, lock: Lock) -> Path:
    root = tmp_path / "proj"
    for rel in metal.metal_sources(lock).files:
        p = root / "vendor" / "ggml" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("// fixture\n")
    unit = root / metal.TRANSLATION_UNIT
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text("// fixture\n")
    return root


@pytest.mark.parametrize("lock", [PRE_SPLIT, POST_SPLIT], ids=["pre-split", "post-split"])
def test_plan_commands(tmp_path: Path, lock: Lock) -> None:
    root = _project(tmp_path, lock)
    p = metal.plan(root, metal.metal_sources(lock), tmp_path / "out", "_ggml_attn_kernels_metal_abc1234", host=MAC)
    assert p.buildable, p.blockers
    compile_, link, embed = p.steps
    argv = compile_.argv
    assert argv[:4] == ("xcrun", "-sdk", "macosx", "metal")
    assert "-std=metal4.0" in argv and "-O2" in argv and "-mmacosx-version-min=26.0" in argv
    assert argv[argv.index("-c") + 1].endswith("csrc/metal/ggml_metal_kernels.metal")
    incs = [a[2:] for a in argv if a.startswith("-I")]
    assert incs == [
        str(root.resolve() / "vendor/ggml/src"),
        str(root.resolve() / "vendor/ggml/src/ggml-metal"),
        str(root.resolve() / "csrc/metal"),
    ]
    assert not any(a.startswith("-D") for a in argv)  # EMBED_LIBRARY / HAS_TENSOR never defined
    # every vendored Metal file is an input of the compile (a change rebuilds the library)
    assert {str(root.resolve() / "vendor/ggml" / f) for f in metal.metal_sources(lock).files} <= set(compile_.inputs)
    assert link.inputs == compile_.outputs and link.argv[3] == "metallib"
    assert embed.inputs == link.outputs and embed.argv[1:4] == ("-m", "toolkit.build.metal", "embed")
    assert p.namespace == "_ggml_attn_kernels_metal_abc1234_metal"
    assert p.mm_defines[0] == '-DEMBEDDED_METALLIB_HEADER="_ggml_attn_kernels_metal_abc1234_metallib.h"'
    assert p.to_dict()["buildable"] is True


def test_plan_on_linux_says_why_not(tmp_path: Path) -> None:
    root = _project(tmp_path, PRE_SPLIT)
    p = metal.plan(root, metal.metal_sources(PRE_SPLIT), tmp_path / "out", "lib", host=LINUX)
    assert not p.buildable
    assert "needs macOS on Apple silicon" in p.blockers[0] and "Linux" in p.blockers[0]
    with pytest.raises(BuildError, match="cannot build the metallib here"):
        metal.execute(p)
    print("Metal binary NOT built on this host:", p.blockers[0])


def test_plan_reports_missing_inputs_and_toolchain(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    no_tools = metal.MetalHost("Darwin", "arm64", "26.0", "/usr/bin/xcrun", None, None)
    p = metal.plan(root, metal.metal_sources(POST_SPLIT), tmp_path / "out", "lib", host=no_tools)
    text = " | ".join(p.blockers)
    assert "downloadComponent MetalToolchain" in text
    assert "run `ggml-vendor sync`" in text and "run `ggml-vendor render`" in text
    old = metal.MetalHost("Darwin", "arm64", "15.5", "/usr/bin/xcrun", "/m", "/l")
    assert any(
        "macOS 26.0" in b for b in metal.plan(root, metal.metal_sources(POST_SPLIT), tmp_path, "lib", host=old).blockers
    )
    with pytest.raises(BuildError, match="not a C identifier"):
        metal.plan(root, metal.metal_sources(POST_SPLIT), tmp_path, "bad-name", host=MAC)


def test_execute_against_a_simulated_xcode(tmp_path: Path) -> None:
    """compile and link are simulated (no Metal compiler here); the embed step is the real CLI."""
    root = _project(tmp_path, PRE_SPLIT)
    p = metal.plan(root, metal.metal_sources(PRE_SPLIT), tmp_path / "out", "lib", host=MAC)
    fixture = metallib.build_fixture(metal.required_kernels(["gated_delta_net", "flash_attn"], FACTS))
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv)
        if argv[:4] == ["xcrun", "-sdk", "macosx", "metal"]:
            Path(argv[argv.index("-o") + 1]).write_bytes(b"air")
        elif argv[:4] == ["xcrun", "-sdk", "macosx", "metallib"]:
            Path(argv[argv.index("-o") + 1]).write_bytes(fixture)
        else:
            return subprocess.run(argv, cwd=str(Path(__file__).resolve().parents[1]), **kw)
        return subprocess.CompletedProcess(argv, 0, "", "")

    header = metal.execute(p, run=fake_run)
    assert len(calls) == 3 and calls[2][0] == sys.executable
    text = header.read_text()
    assert "namespace lib_metal {" in text and f"metallib_data_len = {len(fixture)};" in text
    assert "inline id<MTLLibrary> createLibrary(id<MTLDevice> device, NSError ** error)" in text

    def failing_link(argv, **kw):
        if argv[3] == "metallib":
            return subprocess.CompletedProcess(argv, 1, "", "error: undefined symbol: _air_foo\n")
        return fake_run(argv, **kw)

    with pytest.raises(BuildError, match="metal link failed.*undefined symbol"):
        metal.execute(p, run=failing_link)


def test_embed_refuses_non_metallibs_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "bad.metallib").write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n")
    header = tmp_path / "h" / "x_metallib.h"
    with pytest.raises(metallib.MetallibError):
        metal.embed_metallib(tmp_path / "bad.metallib", header, "x_metal")
    assert not header.exists()
    (tmp_path / "few.metallib").write_bytes(metallib.build_fixture(["kernel_gated_delta_net_f32_1"]))
    with pytest.raises(BuildError, match="lacks 2 kernel"):
        metal.embed_metallib(
            tmp_path / "few.metallib", header, "x_metal", required=metal.required_kernels(["gated_delta_net"], FACTS)
        )
    assert not header.exists() and list((tmp_path / "h").glob("*")) == []


def test_embed_cli(tmp_path: Path) -> None:
    lib = tmp_path / "a.metallib"
    lib.write_bytes(metallib.build_fixture(["k1", "k2"]))
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


@pytest.mark.skipif(
    sys.platform != "darwin" or shutil.which("xcrun") is None,
    reason="the Metal binary is built only on macOS with Xcode 26 (xcrun metal); not on this host",
)
def test_real_metallib_build_on_macos(tmp_path: Path) -> None:  # pragma: no cover - needs a Mac
    host = metal.probe_host()
    if host.blockers:
        pytest.skip("; ".join(host.blockers))
    unit = tmp_path / "proj" / metal.TRANSLATION_UNIT
    unit.parent.mkdir(parents=True)
    unit.write_text("#include <metal_stdlib>\nkernel void kernel_probe(device float * x [[buffer(0)]]) { x[0] = 1; }\n")
    sources = metal.MetalSources(metal.LAYOUT_MONOLITH, (), ())
    p = metal.plan(tmp_path / "proj", sources, tmp_path / "out", "probe", host=host)
    metal.execute(p)
    lib = metallib.parse(Path(p.metallib).read_bytes())
    assert lib.function_names == ("kernel_probe",) and lib.language_version == (4, 0)
