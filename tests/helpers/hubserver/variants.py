"""Tiny kernel variants made by the tests (our own code, compiled on the spot): a real `.so` with
`PyInit_<id>`, device code (a real nvcc fatbin, or a `.nv_fatbin` section we lay out per the format), a
Python package that registers one op under the build's namespace, and a metadata.json with digest and
provenance. They stand in for `ggml-vendor build` output so verify/publish tests run anywhere."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.core.kernels_client import KERNELS_MINVER

FAKE_UPSTREAM_COMMIT = "d99724f2" + "0" * 32
NAME = "ggml-attn-kernels"
MODULE = NAME.replace("-", "_")

_INIT_PY = '''\
"""Fixture kernel package (tests only)."""
import torch

from ._ops import ops, add_op_namespace_prefix

_lib = torch.library.Library("{ident}", "DEF")
_lib.define("scale(Tensor x, float s) -> Tensor")
_lib.impl("scale", lambda x, s: x * s, "CompositeExplicitAutograd")


def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return ops.scale(x, s)


__all__ = ["scale"]
'''

_OPS_PY = """\
import torch
from . import {ident}
ops = torch.ops.{ident}


def add_op_namespace_prefix(op_name: str) -> str:
    return f"{ident}::{{op_name}}"
"""

_C_SRC = r"""
#define Py_LIMITED_API 0x03090000
#include <Python.h>
/* the op namespace, as TORCH_LIBRARY would embed it */
__attribute__((used)) static const char op_namespace[] = "@IDENT@";
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "@IDENT@", NULL, -1, NULL};
@KERNEL@
PyMODINIT_FUNC PyInit_@IDENT@(void) { return PyModule_Create(&def); }
"""

_CUDA_KERNEL = 'extern "C" {\n__global__ void fixture_scale(float* x, float s) { x[threadIdx.x] *= s; }\n'
_CUDA_TAIL = "}\n"


def host_variant_name() -> str:
    """The CUDA variant this machine's torch resolves to (e.g. torch214-cxx11-cu130-x86_64-linux); without
    torch, the variant of the torch the `cuda` extra installs (nothing can import it then: smoke tests skip)."""
    import platform

    try:
        import torch
    except ImportError:
        return f"torch214-cxx11-cu130-{platform.machine()}-linux"
    maj, mino = torch.__version__.split("+")[0].split(".")[:2]
    cuda = (torch.version.cuda or "13.0").split(".")
    return f"torch{maj}{mino}-cxx11-cu{cuda[0]}{cuda[1]}-{platform.machine()}-linux"


def build_fatbin(containers: list[list[tuple[int, str, bool]]]) -> bytes:
    """A `.nv_fatbin` section: containers of (arch, suffix '', 'a' or 'f', is_ptx) entries, laid out as
    toolkit/verify/archs.py documents (payloads are filler bytes)."""
    out = b""
    for entries in containers:
        body = b""
        for arch, suffix, ptx in entries:
            payload = (b"PTX." if ptx else b"\x7fELF") + bytes(60)
            flags = 0x11 | (0x100000 if suffix == "a" else 0x200000 if suffix == "f" else 0)
            hdr = struct.pack(
                "<HHIQIIHHIIIQQQ",
                1 if ptx else 2,
                0x101,
                64,
                len(payload),
                0,
                0,
                0 if ptx else 8,
                9 if ptx else 1,
                arch,
                0,
                0,
                flags,
                0,
                0,
            )
            body += hdr + payload
        out += struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
        out += bytes((-len(out)) % 8)
    return out


def compile_so(
    dest: Path,
    ident: str,
    *,
    compiler: str = "gcc",
    gencode: tuple[str, ...] = (),
    fatbin: bytes | None = None,
    static_cudart: bool = False,
    extra_c: str = "",
    link: tuple[str, ...] = (),
) -> Path:
    """Compile the fixture extension `<ident>.abi3.so` into `dest` (`link`: extra linker arguments, gcc)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"{ident}.abi3.so"
    inc = sysconfig.get_paths()["include"]
    with tempfile.TemporaryDirectory() as tmp:
        if compiler == "nvcc":
            src = Path(tmp) / "ext.cu"
            src.write_text(
                _C_SRC.replace("@IDENT@", ident)
                .replace("@KERNEL@", _CUDA_KERNEL + _CUDA_TAIL)
                .replace("PyMODINIT_FUNC", 'extern "C" PyMODINIT_FUNC')
                + extra_c
            )
            cmd = [
                "nvcc",
                "-shared",
                "-Xcompiler",
                "-fPIC",
                "-I",
                inc,
                "-cudart",
                "static" if static_cudart else "shared",
                *gencode,
                "-o",
                str(out),
                str(src),
            ]
        else:
            src = Path(tmp) / "ext.c"
            kernel = ""
            if fatbin is not None:
                arr = ",".join(str(b) for b in fatbin)
                kernel = (
                    f'__attribute__((used, section(".nv_fatbin"), aligned(8))) '
                    f"static const unsigned char fatbin[] = {{{arr}}};"
                )
            src.write_text(_C_SRC.replace("@IDENT@", ident).replace("@KERNEL@", kernel) + extra_c)
            cmd = ["gcc", "-shared", "-fPIC", "-O1", "-I", inc, "-o", str(out), str(src), *link]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed: {proc.stderr[-2000:]}")
    return out


def digest_files(path: Path) -> dict[str, str]:
    files = {}
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path).as_posix()
        if rel in ("metadata.json", "metadata.json.sigstore") or "__pycache__" in rel or rel.endswith(".pyc"):
            continue
        files[rel] = base64.b64encode(hashlib.sha256(f.read_bytes()).digest()).decode()
    return files


def write_lock(root: Path, *, date: str = "", subject: str = "") -> Path:
    """A vendor/UPSTREAM that matches provenance(): the pin the fixture variants claim to be built from."""
    from toolkit.core.lock import Lock, render_lock

    lock = root / "vendor" / "UPSTREAM"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(
        render_lock(
            Lock(
                upstream="https://github.com/ggml-org/ggml",
                layout="ggml",
                commit=FAKE_UPSTREAM_COMMIT,
                rev="master",
                date=date,
                subject=subject,
                tool_version=__version__,
                files={},
            )
        )
    )
    return lock


def provenance(
    *,
    commit: str = FAKE_UPSTREAM_COMMIT,
    patches: list[dict[str, Any]] | None = None,
    dirty: bool = False,
    url: str = "https://github.com/ggml-org/ggml",
    checkout_dirty: bool | None = None,
) -> dict[str, Any]:
    """`dirty`: vendor/ differed from the lock; `checkout_dirty`: the repository had uncommitted changes
    (provenance.kernel, which build writes when the project is a git checkout; None: not a checkout)."""
    prov: dict[str, Any] = {
        "kernel-builder": {"version": f"ggml-vendor {__version__}"},
        "ggml-vendor": {
            "tool-version": __version__,
            "upstream": {"url": url, "commit": commit, "layout": "ggml"},
            "patches": patches or [],
            "dirty": dirty,
        },
    }
    if checkout_dirty is not None:
        prov["kernel"] = {"commit": "c0ffee" + "0" * 34, "dirty": checkout_dirty}
    return prov


def write_metadata(
    path: Path,
    *,
    ident: str,
    backend: str,
    archs: list[str] | None,
    version: int = 1,
    name: str = NAME,
    prov: dict[str, Any] | None = None,
    digest: bool = True,
    **extra: object,
) -> None:
    meta: dict[str, Any] = {
        "name": name,
        "id": ident,
        "version": version,
        "license": "MIT",
        "python-depends": [],
        "backend": {"type": backend},
        "upstream": "https://github.com/ggml-org/ggml",
        "kernels-minver": KERNELS_MINVER,
        "provenance": prov if prov is not None else provenance(),
    }
    if archs is not None:
        meta["backend"]["archs"] = archs
    meta.update(extra)
    if digest:
        meta["digest"] = {"algorithm": "sha256", "files": digest_files(path)}
    (path / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


_SO_CACHE: dict[tuple[object, ...], bytes] = {}


def make_variant(
    build_dir: Path,
    *,
    variant: str | None = None,
    uid: str = "fx00001",
    backend: str = "cuda",
    archs: list[str] | None = None,
    compiler: str = "gcc",
    gencode: tuple[str, ...] = (),
    fatbin_targets: list[list[tuple[int, str, bool]]] | None = None,
    version: int = 1,
    prov: dict[str, Any] | None = None,
    static_cudart: bool = False,
    module: str = MODULE,
    name: str = NAME,
) -> Path:
    """A complete variant under build_dir; compiled objects are cached per (ident, compiler, targets)."""
    variant = variant or host_variant_name()
    ident = f"_{module}_{backend}_{uid}"
    path = build_dir / variant
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    if backend == "cuda" and archs is None:
        archs = ["8.0", "9.0"]
    if fatbin_targets is None and compiler == "gcc" and backend == "cuda":
        fatbin_targets = [[(int(a.split("+")[0].replace(".", "")[:3].rstrip("af")), "", False) for a in archs or []]]
    key = (ident, compiler, gencode, json.dumps(fatbin_targets), static_cudart)
    if key not in _SO_CACHE:
        with tempfile.TemporaryDirectory() as tmp:
            so = compile_so(
                Path(tmp),
                ident,
                compiler=compiler,
                gencode=gencode,
                static_cudart=static_cudart,
                fatbin=build_fatbin(fatbin_targets) if fatbin_targets else None,
            )
            _SO_CACHE[key] = so.read_bytes()
    (path / f"{ident}.abi3.so").write_bytes(_SO_CACHE[key])
    os.chmod(path / f"{ident}.abi3.so", 0o755)
    (path / "__init__.py").write_text(_INIT_PY.format(ident=ident))
    (path / "_ops.py").write_text(_OPS_PY.format(ident=ident))
    write_metadata(path, ident=ident, backend=backend, archs=archs, version=version, prov=prov, name=name)
    return path


def write_project(
    root: Path,
    *,
    name: str = NAME,
    version: int = 1,
    hub_repo: str = "ggml-test/ggml-attn-kernels",
    upstream: str = "https://github.com/ggml-org/ggml",
) -> Path:
    """A minimal kernel package project (pyproject.toml with [tool.ggml-vendor], the package's facts) for stage
    tests, its source rendered into build/<name>/src/ (what publish pushes beside the variants)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f'''[project]
name = "fixture"
version = "0"

[tool.ggml-vendor]
license = "MIT"
upstream = "{upstream}"
backends = ["cuda", "metal"]

[tool.ggml-vendor.packages.{name}]
version = {version}
hub-repo = "{hub_repo}"

[tool.ggml-vendor.packages.{name}.ops.gated_delta_net]
cuda = ["src/ggml-cuda/gated_delta_net.cu"]
''')
    facts = root / "templates" / name / "facts.py"
    facts.parent.mkdir(parents=True, exist_ok=True)
    facts.write_text('"""The fixture package\'s op facts."""\n\nOPS = ("gated_delta_net",)\n')
    from toolkit import render
    from toolkit.core import config

    render.execute(render.plan(config.load(root)))
    return root
