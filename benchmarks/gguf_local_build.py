"""Build the gguf-kernels package's CUDA sources into an importable `gguf_kernels` without kernel-builder.

For GPU checks on any machine with nvcc and a CUDA build of torch: copies the package's rendered sources
(packages/gguf-kernels/: the CUDA translation units, the torch binding and the Python module) into OUT/src,
compiles the torch-independent CUDA objects with nvcc (ggml's flags, as build.toml's kernel sections give them), links them with the torch binding
through torch.utils.cpp_extension, and lays out OUT/pkg/gguf_kernels/ (the module, its _ops.py naming this
build's op namespace, and the extension). Then `PYTHONPATH=OUT/pkg python3 -c "import gguf_kernels"`.

    python3 benchmarks/gguf_local_build.py --vendor vendor/ggml --out /tmp/gguf-build            # all steps
    python3 benchmarks/gguf_local_build.py --vendor vendor/ggml --out /tmp/gguf-build --objects-only  # nvcc only
    python3 benchmarks/gguf_local_build.py --vendor vendor/ggml --out /tmp/gguf-build --link-only     # reuse .o

The objects need no torch and no GPU (so they can be compiled on one machine and linked on another with the
same CUDA toolkit); --link-only rebuilds whatever object is missing. `--vendor` is a ggml tree in the
standalone layout (include/, src/): `ggml-vendor sync` writes one to vendor/ggml.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # toolkit.core.ggml_facts: ggml's generic CUDA flags
PACKAGE = REPO / "packages" / "gguf-kernels"
MODULE = "gguf_kernels"
CUDA_UNITS = ("gguf_mmvq", "gguf_quantize", "gguf_convert", "gguf_getrows", "ggml_shim")
# What each unit #includes from upstream (the first is the one whose absence means "not synced").
VENDOR_ENTRIES = (
    "src/ggml-cuda/mmvq.cu",
    "src/ggml-cuda/quantize.cu",
    "src/ggml-cuda/convert.cu",
    "src/ggml-cuda/getrows.cu",
    "src/ggml-cuda/common.cuh",
)


class BuildError(RuntimeError):
    """The build cannot proceed; the message says why and what to do."""


def render(vendor: Path, src: Path) -> list[Path]:
    """The package's rendered sources (packages/gguf-kernels/{csrc/cuda,torch-ext}, what `ggml-vendor render`
    writes from templates/gguf-kernels and `render --check` keeps current) -> src/."""
    written = []
    for part in ("csrc/cuda", "torch-ext"):
        for f in sorted((PACKAGE / part).rglob("*")):
            if not f.is_file() or "__pycache__" in f.parts:
                continue
            out = src / f.relative_to(PACKAGE)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, out)
            written.append(out)
    return written


def _cublas_include(scratch: Path) -> list[str]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from raw_ggml.loader import _cublas_include as find
    from raw_ggml.loader import _nvcc

    return find(_nvcc(), scratch)


def _nvcc_cmd(unit: str, vendor: Path, src: Path, obj: Path, arch: str, cublas: list[str]) -> list[str]:
    from toolkit.core import ggml_facts

    includes = [f"-I{vendor / root}" for root in ("include", "src", "src/ggml-cuda")]
    flags = [f for f in ggml_facts.CUDA_FLAGS if not f.startswith("-Xcompiler")]
    return [
        os.environ.get("NVCC", "nvcc"),
        "-c",
        "-O3",
        "-DNDEBUG",
        *flags,
        "-Xcompiler=-fvisibility=hidden,-fPIC",
        f"-gencode=arch=compute_{arch},code=sm_{arch}",
        *includes,
        *cublas,
        f"-I{src / 'csrc' / 'cuda'}",
        str(src / "csrc" / "cuda" / f"{unit}.cu"),
        "-o",
        str(obj),
    ]


def objects(vendor: Path, out: Path, arch: str, jobs: int, only_missing: bool = False) -> list[Path]:
    """nvcc every CUDA unit (in parallel); returns the object paths."""
    src = out / "src"
    objdir = out / f"obj-sm{arch}"
    objdir.mkdir(parents=True, exist_ok=True)
    cublas = _cublas_include(out)
    todo = []
    for unit in CUDA_UNITS:
        obj = objdir / f"{unit}.o"
        if not (only_missing and obj.exists()):
            todo.append((unit, obj))

    def one(item):
        unit, obj = item
        cmd = _nvcc_cmd(unit, vendor, src, obj, arch, cublas)
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode:
            raise BuildError(f"nvcc failed on {unit}.cu:\n{run.stderr[-4000:]}")
        print(f"  compiled {unit}.cu", flush=True)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, todo))
    return [objdir / f"{u}.o" for u in CUDA_UNITS]


def link(out: Path, objs: list[Path], arch: str) -> Path:
    """Compile the torch binding and link it with the objects; lay out OUT/pkg/gguf_kernels."""
    # The op namespace is unique per object set, so that several builds can be imported into one process.
    digest = hashlib.sha256(b"".join(hashlib.sha256(o.read_bytes()).digest() for o in objs)).hexdigest()
    name = f"_{MODULE}_cuda_{digest[:10]}"
    build_dir = out / "ext"
    build_dir.mkdir(parents=True, exist_ok=True)
    src = out / "src"
    script = (
        "import torch.utils.cpp_extension as c, sys\n"
        f"c.load(name={name!r}, sources=[{str(src / 'torch-ext' / 'torch_binding.cpp')!r}],\n"
        f"  extra_cflags=['-O2', '-DCUDA_KERNEL'], extra_ldflags={[str(o) for o in objs]!r} + ['-lcudart'],\n"
        f"  with_cuda=True, is_python_module=False, build_directory={str(build_dir)!r}, verbose=False)\n"
    )
    # No .cu source goes through torch here, but cpp_extension derives arch flags anyway (and fails without a GPU).
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST=os.environ.get("TORCH_CUDA_ARCH_LIST", f"{arch[:-1]}.{arch[-1]}"))
    env.setdefault("CUDA_HOME", _cuda_home())
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    if run.returncode:
        raise BuildError(f"linking the torch binding failed:\n{(run.stdout + run.stderr)[-4000:]}")
    pkg = out / "pkg" / MODULE
    if pkg.exists():
        shutil.rmtree(pkg)
    pkg.mkdir(parents=True)
    for py in (src / "torch-ext" / MODULE).glob("*.py"):
        (pkg / py.name).write_text(py.read_text().replace("@OPS_NAME@", name))
    shutil.copy2(build_dir / f"{name}.so", pkg / f"{name}.so")
    return pkg


def _cuda_home() -> str:
    """The toolkit root holding nvcc's headers (nvcc may be a link outside it, e.g. /usr/local/bin/nvcc)."""
    nvcc = shutil.which(os.environ.get("NVCC", "nvcc")) or "/usr/local/cuda/bin/nvcc"
    for root in (
        Path(nvcc).resolve().parent.parent,
        Path("/usr/local/cuda"),
        *sorted(Path("/usr/local").glob("cuda-*")),
    ):
        if (root / "include" / "cuda_runtime.h").exists():
            return str(root)
    return str(Path(nvcc).resolve().parent.parent)


def _default_arch() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{major}{minor}"
    except ImportError:
        pass
    return "90"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vendor", type=Path, default=REPO / "vendor" / "ggml", help="ggml tree (include/, src/)")
    ap.add_argument("--out", type=Path, required=True, help="build folder")
    ap.add_argument("--arch", default=None, help="CUDA arch, e.g. 90 (default: the GPU's, else 90)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--objects-only", action="store_true", help="copy and compile the CUDA objects, no link")
    mode.add_argument("--link-only", action="store_true", help="reuse existing objects; link the binding")
    args = ap.parse_args(argv)
    vendor = args.vendor.resolve()
    missing = [e for e in VENDOR_ENTRIES if not (vendor / e).exists()]
    if missing:
        print(f"error: {vendor} lacks {missing[0]}: run `ggml-vendor sync` (or pass --vendor)", file=sys.stderr)
        return 2
    arch = args.arch or _default_arch()
    try:
        render(vendor, args.out / "src")
        objs = objects(vendor, args.out, arch, args.jobs, only_missing=args.link_only)
        if args.objects_only:
            print(f"objects in {objs[0].parent}")
            return 0
        pkg = link(args.out, objs, arch)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"built {pkg} (PYTHONPATH={pkg.parent})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
