"""Metal helpers of the build: vendored ggml .metal -> .air -> one metallib -> a C++ header holding its bytes.

This is the offline compile kernel-builder performs for a `backend = "metal"` section (docs/hub-contract.md
§4.7: `metal -std=metal4.0 -O2 [-I...] -c` per .metal, `metallib` to link, `metallib_to_header.py` to
embed), planned with the other compiler steps by toolkit/build/steps.py (the one Metal planner) and run by the local
executor where Xcode's Metal toolchain exists.

Both upstream layouts are supported (docs/upstream.md §4.2, §8.3): the single `src/ggml-metal/ggml-metal.metal`
of the snapshot and the per-op `src/ggml-metal/kernels/*.metal` files after llama.cpp #26561. Either way the
one translation unit is our rendered `csrc/metal/ggml_metal_kernels.metal`, which #defines
GGML_METAL_HAS_BF16 and #includes the vendored entries (kernel-builder cannot pass -D to the Metal
compiler); GGML_METAL_EMBED_LIBRARY and GGML_METAL_HAS_TENSOR are never defined.

The build's own steps (toolkit/build/steps.py: one `metal` compile per .metal, `metallib`, the embed step)
compile and link; this module holds what they and verify share:
    sources = metal_sources(lock)                       # which vendored files, which layout
    embed_metallib(metallib, header, namespace)          # the embed step (python -m toolkit.build.metal embed)
    required_kernels(ops)                                # every kernel name the binding can dispatch (verify)
    probe_host()                                         # what this Mac has for building Metal
"""

from __future__ import annotations

import hashlib
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.build import metallib as mtlb
from toolkit.core import fs
from toolkit.core import ggml_facts as facts
from toolkit.core.errors import BuildError, VendorStateError
from toolkit.core.lock import Lock

LAYOUT_MONOLITH = "monolith"
LAYOUT_SPLIT = "split"
# Our rendered Metal translation unit (templates/csrc/metal); a package's host sources are its facts'
# METAL_HOST_SOURCES.
TRANSLATION_UNIT = "csrc/metal/ggml_metal_kernels.metal"
OUR_INCLUDE = "csrc/metal"
VENDOR_DIR = f"vendor/{facts.VENDOR_SUBDIR}"


# --- which files --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetalSources:
    """The vendored Metal inputs: entry .metal files (#included by our translation unit) and the other
    files of their closures (headers: dependencies only). Paths in the standalone-ggml layout."""

    layout: str
    entries: tuple[str, ...]
    headers: tuple[str, ...]

    @property
    def files(self) -> tuple[str, ...]:
        return self.entries + self.headers


def detect_layout(paths: Iterable[str]) -> str | None:
    """LAYOUT_SPLIT when any path is under ggml-metal/kernels/, LAYOUT_MONOLITH for ggml-metal.metal."""
    paths = list(paths)
    if any(p.startswith(facts.METAL_SPLIT_DIR) and p.endswith(".metal") for p in paths):
        return LAYOUT_SPLIT
    if facts.METAL_MONOLITH in paths:
        return LAYOUT_MONOLITH
    return None


def metal_sources(lock: Lock, ops: Iterable[str] | None = None) -> MetalSources:
    """The Metal sources the lock pins, for the ops named by their lock keys (`ops`; None: every op the lock
    holds, one package's lock). Entries keep config order, duplicates (the monolith serves several ops) collapse."""
    if lock is None:
        raise VendorStateError("vendor/ has no lock (vendor/UPSTREAM)", "run `ggml-vendor sync` first")
    wanted = None if ops is None else set(ops)
    entries: list[str] = []
    headers: list[str] = []
    for op, per_backend in lock.entries.items():
        if wanted is not None and op not in wanted:
            continue
        for path in per_backend.get("metal", ()):
            if path.endswith(".metal") and path not in entries:
                entries.append(path)
        for path in lock.closures.get(op, {}).get("metal", ()):
            if not path.endswith(".metal") and path not in headers:
                headers.append(path)
    if not entries:
        raise VendorStateError(
            "the lock pins no Metal sources",
            'add "metal" to backends and its entries to [tool.ggml-vendor.ops], then sync',
        )
    layout = detect_layout(entries)
    if layout is None:
        raise VendorStateError(
            f"Metal entries {entries} are neither {facts.METAL_MONOLITH} nor under {facts.METAL_SPLIT_DIR}",
            "point the ops' metal entries at one of ggml's two Metal layouts",
        )
    return MetalSources(layout, tuple(entries), tuple(headers))


def required_kernels(ops: Iterable[str], op_facts: Any) -> tuple[str, ...]:
    """Every Metal function the binding may look up for these ops (what the metallib must contain): the
    package facts' METAL_KERNELS (op -> names), in its order."""
    wanted = set(ops)
    table = getattr(op_facts, "own", {}).get("METAL_KERNELS", {})
    return tuple(name for op, names in table.items() if op in wanted for name in names)


# --- the host ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetalHost:
    """What this machine has for building Metal."""

    system: str  # platform.system()
    machine: str
    macos: str | None  # e.g. "26.0"
    xcrun: str | None
    metal: str | None  # `xcrun -sdk macosx -f metal`
    metallib: str | None


def _xcrun_find(xcrun: str, tool: str, run: Callable[..., subprocess.CompletedProcess[str]]) -> str | None:
    try:
        res = run([xcrun, "-sdk", "macosx", "-f", tool], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = res.stdout.strip()
    return path if res.returncode == 0 and path else None


def probe_host(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> MetalHost:
    system, machine = platform.system(), platform.machine()
    macos = (platform.mac_ver()[0] or None) if system == "Darwin" else None
    xcrun = shutil.which("xcrun") if system == "Darwin" else None
    metal = _xcrun_find(xcrun, "metal", run) if xcrun else None
    metallib = _xcrun_find(xcrun, "metallib", run) if xcrun else None
    return MetalHost(system, machine, macos, xcrun, metal, metallib)


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def header_source(data: bytes, namespace: str, *, source_name: str = "metallib") -> str:
    """A C++ header holding `data` (kernel-builder's metallib_to_header.py shape: `metallib_data[]`,
    `metallib_data_len` in `namespace`) plus `createLibrary(device, &error)` for Objective-C++ includers.
    Deterministic: same bytes in, same text out."""
    if not _NAME.match(namespace):
        raise BuildError(f"namespace {namespace!r} is not a C identifier", "use letters, digits and underscores")
    digest = hashlib.sha256(data).hexdigest()
    rows = "\n".join("    " + ", ".join(f"0x{b:02x}" for b in data[i : i + 16]) + "," for i in range(0, len(data), 16))
    return (
        f"// Generated by ggml-vendor (toolkit/build/metal.py) from {source_name}: {len(data)} bytes, sha256 {digest}.\n"
        "// Do not edit; rebuild the metallib instead.\n"
        "#pragma once\n"
        "#include <cstddef>\n"
        "#ifdef __OBJC__\n"
        "#import <Foundation/Foundation.h>\n"
        "#import <Metal/Metal.h>\n"
        "#endif\n\n"
        f"namespace {namespace} {{\n\n"
        "alignas(16) static const unsigned char metallib_data[] = {\n"
        f"{rows}\n"
        "};\n"
        f"static const size_t metallib_data_len = {len(data)};\n\n"
        "#ifdef __OBJC__\n"
        "// The library from the embedded bytes (newLibraryWithData: copies what it needs).\n"
        "inline id<MTLLibrary> createLibrary(id<MTLDevice> device, NSError ** error) {\n"
        "    dispatch_data_t data = dispatch_data_create(metallib_data, metallib_data_len, nil,\n"
        "                                                DISPATCH_DATA_DESTRUCTOR_DEFAULT);\n"
        "    id<MTLLibrary> library = [device newLibraryWithData:data error:error];\n"
        "#if !__has_feature(objc_arc)\n"
        "    dispatch_release(data);\n"
        "#endif\n"
        "    return library;\n"
        "}\n"
        "#endif\n\n"
        f"}}  // namespace {namespace}\n"
    )


def embed_metallib(metallib: Path, header: Path, namespace: str, *, required: Iterable[str] = ()) -> mtlb.MetalLibrary:
    """Check that `metallib` is a usable metallib (and has `required` kernels), then write the header
    atomically. Returns what was embedded."""
    data = Path(metallib).read_bytes()
    lib = mtlb.parse(data, where=str(metallib))
    problems = mtlb.check(lib, required=required, min_macos=facts.METAL_MIN_MACOS)
    if problems:
        raise BuildError(f"{metallib}: {problems[0]}", "rebuild the metallib from the vendored sources")
    fs.atomic_write(Path(header), header_source(data, namespace, source_name=Path(metallib).name).encode("utf-8"))
    return lib


# --- running -------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m toolkit.build.metal embed METALLIB HEADER NAMESPACE`: the plan's embed step."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 4 and args[0] == "embed":
        try:
            lib = embed_metallib(Path(args[1]), Path(args[2]), args[3])
        except (BuildError, mtlb.MetallibError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"embedded {len(lib.functions)} functions ({lib.size} bytes) as {args[3]}::metallib_data")
        return 0
    print("usage: python -m toolkit.build.metal embed METALLIB HEADER NAMESPACE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
