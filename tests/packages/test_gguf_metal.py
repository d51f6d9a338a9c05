"""gguf-kernels' Metal backend on the CPU: ggml-metal's gemv (kernel_mul_mv_<type>_f32), expert-routed gemv
(kernel_mul_mv_id_<type>_f32) and row gather (kernel_get_rows_<type>), rendered for both upstream layouts.

* the monolithic src/ggml-metal/ggml-metal.metal of our pin (a lock naming it, as tests/render/test_metal.py does
  for the first package) and the per-op src/ggml-metal/kernels/*.metal layout, for which a miniature upstream
  written here stands in (its closure is computed by sync's own include walker, so a kernel file including
  common.h / dequantize.h is followed and a missing include is an error);
* the metallib a Metal variant ships must hold exactly the kernels the binding can look up (the facts' names);
* build.toml passes kernels' own parser with its Metal section; `variants -p gguf-kernels` lists the macOS rows.

The Metal binary itself is built only on macOS (the CI's macOS job): the last test says so when skipped.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import metallib_fixture
from tests.helpers.machine import metal_blockers
from toolkit.build import metal, metallib
from toolkit.core import config as config_mod
from toolkit.core import package_facts
from toolkit.core.config import Config
from toolkit.core.errors import UpstreamError
from toolkit.core.lock import Lock, read_lock
from toolkit.render import stage as render
from toolkit.sync.closure import Closure, compute_closure

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "gguf-kernels"
FACTS = package_facts.load(REPO / "templates" / "gguf-kernels", PACKAGE)
MONO = "src/ggml-metal/ggml-metal.metal"
IMPL = "src/ggml-metal/ggml-metal-impl.h"
COMMON = "src/ggml-common.h"
SPLIT = "src/ggml-metal/kernels/"


@pytest.fixture(scope="module")
def cfg() -> Config:
    return config_mod.load(REPO).for_package(PACKAGE)


def key(cfg: Config, op: str) -> str:
    return cfg.lock_key(op)


# ---- a miniature per-op upstream (our own text: host names and includes only, no ggml code) -------------------

# Each per-op file opens like upstream's after the split (`#include "common.h"`), and the gemv and gather files
# include the shared dequantizers; common.h reaches ggml-metal-impl.h and ggml-common.h.
PER_OP_TREE = {
    SPLIT + "common.h": '#pragma once\n#include "../ggml-metal-impl.h"\n#include "ggml-common.h"\n',
    SPLIT + "dequantize.h": '#pragma once\n#include "common.h"\n',
    SPLIT + "mul_mv.metal": '#include "common.h"\n#include "dequantize.h"\n'
    + "".join(f'[[host_name("{n}")]]\n' for n in FACTS.METAL_KERNELS["mul_mat_vec"]),
    SPLIT + "get_rows.metal": '#include "common.h"\n#include "dequantize.h"\n'
    + "".join(f'[[host_name("{n}")]]\n' for n in FACTS.METAL_KERNELS["get_rows"]),
    SPLIT + "fa.metal": '#include "common.h"\n',  # another package's op: never in this package's closure
    IMPL: "#pragma once\n#define FC_MUL_MV 600\n",
    COMMON: "#pragma once\n",
}
MONO_TREE = {
    MONO: '#include "ggml-common.h"\n#include "ggml-metal-impl.h"\n',
    IMPL: "#pragma once\n",
    COMMON: "#pragma once\n",
}


def closure_of(cfg: Config, tree: dict[str, str]) -> Closure:
    """sync's closure of the package's Metal entries over a miniature tree."""
    entries = [(key(cfg, op.name), "metal", e) for op in cfg.ops for e in op.entries.get("metal", ())]
    return compute_closure(entries, lambda p: tree[p].encode() if p in tree else None, where="the fixture")


def lock_of(cfg: Config, tree: dict[str, str], commit: str) -> Lock:
    closure = closure_of(cfg, tree)
    return Lock(
        upstream="https://github.com/ggml-org/ggml",
        layout="ggml",
        commit=commit,
        rev="master",
        date="2026-09-20T00:00:00+00:00",
        subject="fixture",
        tool_version="0.1.0",
        files={},
        entries={c.op: {"metal": c.entries} for c in closure.ops},
        closures={c.op: {"metal": c.files} for c in closure.ops},
    )


LAYOUTS = {"monolith": (MONO_TREE, "d99724f2b141fed9e1a9f402213506c081433465"), "per-op": (PER_OP_TREE, "1" * 40)}


def rendered(cfg: Config, layout: str) -> tuple[dict[str, str], Lock]:
    tree, commit = LAYOUTS[layout]
    lock = lock_of(cfg, tree, commit)
    plan = render.plan(cfg, lock, read_vendor_lock=False)  # validates build.toml with kernels' parser
    return {f.path: f.content for f in plan.files}, lock


# ---- config and closure --------------------------------------------------------------------------------------


def test_metal_entries_are_first_that_exists(cfg: Config) -> None:
    assert "metal" in cfg.backends
    metal_ops = {op.name: [e.alternatives for e in op.entries["metal"]] for op in cfg.ops if "metal" in op.entries}
    assert set(metal_ops) == set(FACTS.METAL_OPS)
    for op, entries in metal_ops.items():
        assert entries == [FACTS.METAL_ENTRY[op]], op
        assert entries[0][-1] == MONO and entries[0][0].startswith(SPLIT)


def test_per_op_closure_follows_the_kernels_includes(cfg: Config) -> None:
    closure = closure_of(cfg, PER_OP_TREE)
    per_op = {c.op: c for c in closure.ops}
    mv = per_op[key(cfg, "mul_mat_vec")]
    assert mv.entries == (SPLIT + "mul_mv.metal",)
    assert set(mv.files) == {SPLIT + "mul_mv.metal", SPLIT + "common.h", SPLIT + "dequantize.h", IMPL, COMMON}
    for op in ("get_rows", "dequantize"):
        assert per_op[key(cfg, op)].entries == (SPLIT + "get_rows.metal",)
    assert SPLIT + "fa.metal" not in closure.files  # nothing of another package's op
    # Nothing missing: every file of the union is in the tree, and each is needed by one of our ops.
    assert set(closure.files) <= set(PER_OP_TREE)
    assert all(closure.needed_by[p] for p in closure.files)


def test_monolith_closure_at_the_pin(cfg: Config) -> None:
    closure = closure_of(cfg, MONO_TREE)
    assert {c.entries for c in closure.ops} == {(MONO,)}
    assert set(closure.files) == {MONO, IMPL, COMMON}


def test_a_missing_kernel_header_is_an_error(cfg: Config) -> None:
    broken = dict(PER_OP_TREE)
    del broken[SPLIT + "dequantize.h"]
    with pytest.raises(UpstreamError) as exc:
        closure_of(cfg, broken)
    assert "dequantize.h" in exc.value.message


def test_the_pinned_lock_holds_the_metal_closures() -> None:
    lock = read_lock(REPO / "vendor")
    assert lock is not None
    for op in FACTS.METAL_OPS:
        files = lock.closure(f"{PACKAGE}:{op}", "metal")
        assert files[0] == MONO and IMPL in files, (op, files)
    keys = [f"{PACKAGE}:{op}" for op in FACTS.METAL_OPS]
    sources = metal.metal_sources(lock, keys)
    assert sources.entries == (MONO,) and sources.layout == metal.LAYOUT_MONOLITH


# ---- render ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_translation_unit_includes_each_entry_once(cfg: Config, layout: str) -> None:
    files, _ = rendered(cfg, layout)
    unit = files[FACTS.METAL_TU]
    includes = re.findall(r'^#include "([^"]+)"', unit, re.M)
    want = ["ggml-metal.metal"] if layout == "monolith" else ["kernels/mul_mv.metal", "kernels/get_rows.metal"]
    assert includes == want
    assert re.findall(r"^#define (\w+)", unit, re.M) == list(FACTS.METAL_DEFINES)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_metal_section_is_valid_and_lists_the_closure(cfg: Config, layout: str) -> None:
    import tomlkit

    from toolkit.core.kernels_client import kernels_type

    files, lock = rendered(cfg, layout)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "build.toml").write_text(files["build.toml"])
        build = kernels_type("Build").open(tmp)  # kernels' own parser (kernel-builder's)
    assert {str(b).lower().rsplit(".", 1)[-1] for b in build.general.backends} == {"cuda", "metal"}
    sec = tomlkit.parse(files["build.toml"]).unwrap()["kernel"]["gguf_metal"]
    assert sec["backend"] == "metal" and sec["depends"] == ["torch"]
    assert [s for s in sec["src"] if s.endswith(".metal")] == [FACTS.METAL_TU]
    assert [s for s in sec["src"] if s.endswith(".mm")] == list(FACTS.METAL_HOST_SOURCES)
    keys = [key(cfg, op) for op in FACTS.METAL_OPS]
    headers = metal.metal_sources(lock, keys).headers
    vendored = [s for s in sec["src"] if "vendor/ggml/" in s]
    assert [s.split("vendor/ggml/", 1)[1] for s in vendored] == list(headers)
    if layout == "per-op":
        assert SPLIT + "common.h" in headers and SPLIT + "dequantize.h" in headers
    assert sec["include"][-1] == "csrc/metal"


def test_metal_sources_of_one_package_leave_the_others_out(cfg: Config) -> None:
    _, lock = rendered(cfg, "per-op")
    mixed = Lock(
        **{
            **lock.__dict__,
            "entries": {**lock.entries, "flash_attn": {"metal": (SPLIT + "fa.metal",)}},
            "closures": {**lock.closures, "flash_attn": {"metal": (SPLIT + "fa.metal", SPLIT + "common.h")}},
        }
    )
    ours = metal.metal_sources(mixed, [key(cfg, op) for op in FACTS.METAL_OPS])
    assert ours.entries == (SPLIT + "mul_mv.metal", SPLIT + "get_rows.metal")
    assert SPLIT + "fa.metal" in metal.metal_sources(mixed).entries  # None: every op of the lock


def test_rendered_tree_is_reproducible_and_has_the_metal_sources(cfg: Config) -> None:
    plan = render.plan(cfg)
    paths = {f.path for f in plan.files}
    assert {FACTS.METAL_TU, *FACTS.METAL_HOST_SOURCES, *FACTS.METAL_HOST_HEADERS} <= paths
    assert render.unreproducible(cfg, plan) == [], "two renders of gguf-kernels differ"


# ---- the binding and the metallib ---------------------------------------------------------------------------------

_ROW = re.compile(r'^\s*\{(\d+), "(\w+)", (\d+), (\d+), N_R0_(\w+), N_SG_(\w+), ([^,]+), (true|false)\},$', re.M)


def binding_table(cfg: Config) -> dict[int, tuple[str, ...]]:
    files, _ = rendered(cfg, "monolith")
    return {int(m[0]): m[1:] for m in _ROW.findall(files["csrc/metal/gguf_metal.mm"])}


def binding_kernel_names(cfg: Config) -> set[str]:
    """The functions the binding can look up: its type table through the prefixes it builds names from."""
    files, _ = rendered(cfg, "monolith")
    mm = files["csrc/metal/gguf_metal.mm"]
    patterns = re.findall(r'std::string\("(kernel_\w+_)"\) \+ t\.name(?: \+ "(_f32)")?;', mm)
    assert len(patterns) == 3, patterns  # mul_mv, mul_mv_id, get_rows
    return {pre + row[0] + post for pre, post in patterns for row in binding_table(cfg).values()}


def test_binding_table_is_the_facts(cfg: Config) -> None:
    table = binding_table(cfg)
    assert set(table) == set(FACTS.METAL_TYPES)
    for tid, (name, elems, nbytes, r0, sg, smem, by_nr0) in table.items():
        assert (name, int(elems), int(nbytes)) == FACTS.METAL_TYPES[tid]
        assert r0 == sg == name.upper()  # ggml's own N_R0_<T> / N_SG_<T>
        assert smem.strip() == FACTS.METAL_MV_SMEM.get(tid, "0")
        assert (by_nr0 == "true") == (tid in FACTS.METAL_MV_GRID_BY_NR0)
    # The CUDA build's types (a Q4_K_M checkpoint is Q4_K + Q6_K) are all covered on Metal.
    assert {2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23} <= set(table)


def test_metallib_kernel_list_is_what_the_facts_name(cfg: Config) -> None:
    required = metal.required_kernels([op.name for op in cfg.ops], FACTS)
    assert set(required) == binding_kernel_names(cfg)
    assert len(required) == len(set(required)) + len(FACTS.METAL_TYPES)  # get_rows serves dequantize too
    lib = metallib.parse(metallib_fixture.build_fixture(sorted(set(required))))
    assert metallib.check(lib, required=required) == []
    short = metallib.parse(metallib_fixture.build_fixture(sorted(set(required))[1:]))
    assert any("lacks 1 kernel" in p for p in metallib.check(short, required=required))


def _vendored(rel: str) -> str:
    path = REPO / "vendor" / "ggml" / rel
    if not path.is_file():
        pytest.skip(f"vendor/ggml/{rel} is not synced here (run `ggml-vendor sync`): the pinned source is not checked")
    return path.read_text()


def test_pinned_monolith_defines_every_kernel_and_the_header_every_name(cfg: Config) -> None:
    source = _vendored(MONO)
    # A Metal function's name is its [[host_name]] when it has one, else the kernel's own name.
    host = set(re.findall(r'host_name\("(\w+)"\)', source)) | set(re.findall(r"^kernel void (\w+)\(", source, re.M))
    missing = sorted(set(metal.required_kernels([op.name for op in cfg.ops], FACTS)) - host)
    assert not missing, f"the pinned ggml-metal.metal has no {missing}"
    header = _vendored(IMPL)
    for name, *_ in FACTS.METAL_TYPES.values():
        for macro in (f"N_R0_{name.upper()}", f"N_SG_{name.upper()}"):
            assert re.search(rf"#define {macro}\b", header), macro
    files, _ = rendered(cfg, "monolith")
    mm = files["csrc/metal/gguf_metal.mm"]
    for struct in ("ggml_metal_kargs_mul_mv", "ggml_metal_kargs_mul_mv_id", "ggml_metal_kargs_get_rows"):
        body = re.search(r"typedef struct \{([^}]*)\} " + struct + ";", header)
        assert body, struct
        fields = set(re.findall(r"\b(\w+);", body.group(1)))
        fn = mm[mm.index(f"  {struct} a{{}};") :]
        fn = fn[: fn.index("gguf_metal::Dispatch d;")]
        assert set(re.findall(r"^\s*a\.(\w+) =", fn, re.M)) == fields, struct  # every field set, none invented


# ---- the build matrix -----------------------------------------------------------------------------------------------


def test_variants_list_the_metal_rows() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "variants", "-p", PACKAGE, "--json", "-C", str(REPO)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    text = json.dumps(doc)
    metal_ids = sorted(set(re.findall(r"torch\d+-metal-aarch64-darwin", text)))
    assert metal_ids == [
        "torch213-metal-aarch64-darwin",
        "torch214-metal-aarch64-darwin",
        "torch215-metal-aarch64-darwin",
    ]


def test_metal_binary_builds_on_macos() -> None:
    """On a Mac with Xcode 26: the real build (the one Metal planner, toolkit/build/steps.py) compiles the package's
    Metal unit against the vendored sources, and verify finds every kernel the binding looks up in the metallib."""
    host = metal.probe_host()
    blockers = metal_blockers(host)
    if blockers:
        pytest.skip(f"the Metal binary is built only on macOS with Xcode 26 (the macOS CI job): {blockers[0]}")
    for argv in (["build", "-p", PACKAGE, "--variant", "*-metal-*"], ["verify", "-p", PACKAGE, "--no-conformance"]):
        out = subprocess.run(
            [sys.executable, "-m", "toolkit.cli", *argv, "-C", str(REPO)], capture_output=True, text=True, cwd=REPO
        )
        assert out.returncode == 0, out.stderr


def test_binding_compiles_as_cpp_against_the_vendored_header(tmp_path: Path, cfg: Config) -> None:
    """No Objective-C++ compiler here: the binding's C++ (kargs fields and types, N_R0/N_SG macros, the torch
    calls) is compiled with g++ against the vendored ggml-metal-impl.h and torch's headers. The runtime header is
    the rendered one with its one Objective-C type (id<MTLBuffer>) spelled as a pointer."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH: the binding's C++ is not compiled")
    _vendored(IMPL)
    from torch.utils.cpp_extension import include_paths

    files, _ = rendered(cfg, "monolith")
    (tmp_path / "csrc" / "metal").mkdir(parents=True)
    (tmp_path / "torch-ext").mkdir()
    (tmp_path / "csrc/metal/gguf_metal.mm").write_text(files["csrc/metal/gguf_metal.mm"])
    (tmp_path / "torch-ext/torch_binding.h").write_text(files["torch-ext/torch_binding.h"])
    runtime = files["csrc/metal/gguf_metal_runtime.h"]
    assert "id<MTLBuffer>" in runtime
    runtime = runtime.replace("#import <Metal/Metal.h>", "").replace("id<MTLBuffer>", "void *")
    (tmp_path / "csrc/metal/gguf_metal_runtime.h").write_text(runtime)
    for stub in ("Foundation/Foundation.h", "Metal/Metal.h"):  # the binding itself uses no Apple API
        (tmp_path / "stubs" / stub).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "stubs" / stub).write_text("#pragma once\n")
    vendor = REPO / "vendor" / "ggml"
    argv = ["g++", "-std=c++20", "-fsyntax-only", "-Wall", "-Wno-deprecated", "-x", "c++", "-DMETAL_KERNEL"]
    argv += [f"-I{tmp_path / 'stubs'}", f"-I{vendor / 'src/ggml-metal'}", f"-I{vendor / 'src'}"]
    argv += [f"-I{p}" for p in include_paths()] + [str(tmp_path / "csrc/metal/gguf_metal.mm")]
    out = subprocess.run(argv, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    # The Metal build's torch binding (registration of the MPS implementations) in plain C++ too.
    import sysconfig

    for name in ("torch_binding.cpp", "registration.h"):
        (tmp_path / "torch-ext" / name).write_text(files[f"torch-ext/{name}"])
    argv = ["g++", "-std=c++20", "-fsyntax-only", "-x", "c++", "-DMETAL_KERNEL", "-DTORCH_EXTENSION_NAME=_gguf_test"]
    argv += [f"-I{p}" for p in include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    out = subprocess.run([*argv, str(tmp_path / "torch-ext/torch_binding.cpp")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
