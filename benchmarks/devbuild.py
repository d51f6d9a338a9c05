"""Direct build of the rendered CUDA sources into build/<variant>/ with nvcc + g++ (no CMake, no kernel-builder).

A stand-in for `ggml-vendor build` (engineer H3's executor) that compiles exactly what the rendered build.toml
says: every `.cu` of every `[kernel.*]` section with backend "cuda" (its `include`, `cuda-flags`, and either its
`cuda-capabilities` or --archs), then `[torch] src` with the host compiler against the running torch, linked into
`_<module>_cuda_<uid>.abi3.so` next to the package's Python files (`_ops.py` with @OPS_NAME@ replaced) and a
metadata.json that kernels' own parser accepts. The result loads with `kernels.get_local_kernel(<root>)`.

    python3 benchmarks/devbuild.py [--root .] [--archs 9.0] [--out build] [--jobs N] [--uid UID]

Prints the variant directory on its last line. Used by docs/gpu-results.md's GPU session and by
tests/test_compile_binding.py (against the miniature upstream).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

PLACEHOLDER = "@OPS_NAME@"


def capability_gencode(cap: str) -> list[str]:
    """kernel-builder capability syntax ("9.0", "9.0a", "12.0+PTX") -> nvcc -gencode flags."""
    m = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", cap)
    if not m:
        raise SystemExit(f"devbuild: cannot read CUDA capability {cap!r}")
    sm = f"{m.group(1)}{m.group(2)}{m.group(3)}"
    flags = ["-gencode", f"arch=compute_{sm},code=sm_{sm}"]
    if m.group(4):
        flags += ["-gencode", f"arch=compute_{sm},code=compute_{sm}"]
    return flags


def cuda_home() -> Path:
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env:
        return Path(env)
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = Path(nvcc).resolve()
        if real.parent.name == "bin" and (real.parent.parent / "include" / "cuda_runtime.h").is_file():
            return real.parent.parent
    return Path("/usr/local/cuda")


def cublas_include(cuda: Path, scratch: Path) -> list[str]:
    """ggml's vendors/cuda.h includes cublas_v2.h (headers only, nothing is linked). When the toolkit lacks it,
    point at the pip wheel's copy through a directory holding only the cuBLAS headers."""
    if (cuda / "include" / "cublas_v2.h").is_file():
        return []
    for base in map(Path, sys.path):
        for cand in sorted(base.glob("nvidia/cu*/include/cublas_v2.h")) + sorted(base.glob("nvidia/cublas/include/cublas_v2.h")):
            inc = scratch / "cublas-include"
            inc.mkdir(parents=True, exist_ok=True)
            for header in cand.parent.glob("cublas*.h"):
                link = inc / header.name
                if not link.exists():
                    link.symlink_to(header)
            return [f"-I{inc}"]
    raise SystemExit("devbuild: cublas_v2.h not found (install the CUDA toolkit's cuBLAS headers or nvidia-cublas)")


def run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        raise SystemExit(f"devbuild: command failed ({proc.returncode}): {cmd[0]} ... {cmd[-1]}")


def source_digest(root: Path, files: list[Path], salt: str) -> str:
    h = hashlib.sha256(salt.encode())
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:7]


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="project root (holds build.toml, torch-ext/, csrc/, vendor/)")
    ap.add_argument("--archs", default=None, help="comma-separated capabilities (default: build.toml's)")
    ap.add_argument("--out", default=None, help="output folder holding <variant>/ (default: <root>/build)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--uid", default=None, help="unique id in the op namespace (default: hash of the sources)")
    args = ap.parse_args(argv)

    import torch  # the torch this variant is for

    root = Path(args.root).resolve()
    build = tomllib.loads((root / "build.toml").read_text())
    name = build["general"]["name"]
    module = name.replace("-", "_")
    kernels = {k: v for k, v in build.get("kernel", {}).items() if v.get("backend") == "cuda"}
    if not kernels:
        raise SystemExit("devbuild: build.toml has no [kernel.*] section with backend = \"cuda\"")
    cuda = cuda_home()
    nvcc = shutil.which("nvcc") or str(cuda / "bin" / "nvcc")
    scratch = Path(tempfile.mkdtemp(prefix="devbuild-"))

    tv = torch.__version__.split("+")[0].split(".")
    cv = (torch.version.cuda or "0.0").split(".")
    variant = f"torch{tv[0]}{tv[1]}-cxx11-cu{cv[0]}{cv[1]}-{platform.machine()}-linux"
    sources = [root / s for k in kernels.values() for s in k["src"]] + [root / s for s in build["torch"]["src"]]
    vendor_files = [p for p in (root / "vendor").rglob("*") if p.is_file()] if (root / "vendor").is_dir() else []
    uid = args.uid or source_digest(root, sources + vendor_files, torch.__version__ + (args.archs or ""))
    ops_id = f"_{module}_cuda_{uid}"

    # 1. CUDA translation units: torch-independent (no torch include path at all).
    jobs: list[list[str]] = []
    objects: list[Path] = []
    archs_used: set[str] = set()
    for kname, k in kernels.items():
        archs = args.archs.split(",") if args.archs else list(k.get("cuda-capabilities", []))
        archs_used.update(archs)
        gencode = [flag for cap in archs for flag in capability_gencode(cap)]
        includes = [f"-I{root / inc}" for inc in k.get("include", [])] + cublas_include(cuda, scratch)
        for src in k["src"]:
            if not src.endswith(".cu"):
                continue
            obj = scratch / f"{kname}-{Path(src).stem}.o"
            objects.append(obj)
            jobs.append([nvcc, "-c", str(root / src), "-o", str(obj), "-O3", "-Xcompiler=-fPIC",
                         *k.get("cuda-flags", []), *includes, *gencode])

    # 2. the binding: host compiler, torch + Python headers, CUDA_KERNEL, the variant id.
    from torch.utils import cpp_extension

    std = "-std=c++20" if (int(tv[0]), int(tv[1])) >= (2, 12) else "-std=c++17"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cxx = os.environ.get("CXX", "g++")
    torch_includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{cuda / 'include'}",
                                                                           f"-I{sysconfig.get_paths()['include']}"]
    defines = [f"-DTORCH_EXTENSION_NAME={ops_id}", "-DCUDA_KERNEL", "-DUSE_CUDA=1", "-DPy_LIMITED_API=0x03090000",
               f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    for src in build["torch"]["src"]:
        if src.endswith((".cpp", ".cc", ".cxx")):
            obj = scratch / f"torch-{Path(src).stem}.o"
            objects.append(obj)
            jobs.append([cxx, "-c", str(root / src), "-o", str(obj), "-O2", "-fPIC", std, *defines, *torch_includes,
                         *build["torch"].get("cxx-flags", [])])

    print(f"devbuild: {len(jobs)} compile jobs ({args.jobs} at a time) for {variant}, id {ops_id}", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for fut in [pool.submit(run, cmd, root) for cmd in jobs]:
            fut.result()

    # 3. link: torch and cudart only (both already loaded by `import torch` in the user's process).
    out_root = Path(args.out).resolve() if args.out else root / "build"
    out_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{variant}.", dir=out_root))
    torch_lib = Path(torch.__file__).parent / "lib"
    so = staging / f"{ops_id}.abi3.so"
    run([cxx, "-shared", "-o", str(so), *map(str, objects), f"-L{torch_lib}", "-ltorch", "-ltorch_cpu", "-ltorch_cuda",
         "-lc10", "-lc10_cuda", f"-L{cuda / 'lib64'}", "-lcudart"], root)

    # 4. the Python package, with the variant id substituted, and metadata.json.
    pkg = root / "torch-ext" / module
    for py in sorted(pkg.glob("*.py")):
        text = py.read_text()
        (staging / py.name).write_text(text.replace(PLACEHOLDER, ops_id))
    caps = sorted(archs_used, key=lambda c: [int(x) for x in re.findall(r"\d+", c)])
    metadata = {"name": name, "id": ops_id, "version": build["general"]["version"],
                "license": build["general"]["license"], "python-depends": [],
                "backend": {"type": "cuda", "archs": caps}}
    if "upstream" in build["general"]:
        metadata["upstream"] = build["general"]["upstream"]
    (staging / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    try:
        from kernels._rust import Metadata

        Metadata.read_from_file(staging / "metadata.json")
    except ImportError:
        pass

    final = out_root / variant
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    shutil.rmtree(scratch, ignore_errors=True)
    print(final)
    return final


if __name__ == "__main__":
    main()
