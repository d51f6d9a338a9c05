"""Builds our raw-ggml harness (these .cu files + the vendored upstream sources) with nvcc and loads it via ctypes.

The harness is the benchmarks' baseline: upstream's kernels launched the way ggml launches them, with no
torch binding in between, so "op vs raw" isolates what the binding costs. Nothing here is shipped.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ("raw_shim.cu", "raw_gdn.cu", "raw_fa.cu")
# Upstream entry files the harness TUs #include (their closures: docs/upstream.md §1.5 and §3.1).
VENDOR_ENTRIES = ("src/ggml-cuda/gated_delta_net.cu", "src/ggml-cuda/fattn-vec.cuh", "src/ggml-cuda/common.cuh")
# Folders whose headers can be in those closures: all of them go into the build cache key.
VENDOR_HASHED = ("include", "src", "src/ggml-cuda", "src/ggml-cuda/vendors")
# ggml's own CUDA flags (docs/upstream.md §1.7); no torch flags are involved since no torch header is used.
NVCC_FLAGS = (
    "-std=c++17",
    "-O3",
    "-use_fast_math",
    "-extended-lambda",
    "-DGGML_USE_CUDA",
    "-DNDEBUG",
    "-Xcompiler",
    "-fPIC",
    "-Xcompiler",
    "-fvisibility=hidden",
)


class RawUnavailable(RuntimeError):
    """The harness cannot be built here; the message says why and what to do."""


def _nvcc() -> str:
    for cand in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if cand and (Path(cand) / "bin" / "nvcc").exists():
            return str(Path(cand) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if not found:
        raise RawUnavailable("nvcc not found: install the CUDA toolkit or set CUDA_HOME")
    return found


def _cublas_include(nvcc: str, scratch: Path) -> list[str]:
    """ggml's vendors/cuda.h includes <cublas_v2.h> unconditionally (declarations only, nothing is linked).
    Use the toolkit's header; else the one in the nvidia-cublas wheel, exposed alone via a folder of links
    so that the wheel's other CUDA headers cannot shadow the toolkit's."""
    toolkit_inc = Path(nvcc).resolve().parent.parent / "include"
    if (toolkit_inc / "cublas_v2.h").exists():
        return []
    try:
        import nvidia  # type: ignore[import-not-found]

        for base in nvidia.__path__:
            for sub in ("cu13", "cu12", "cublas"):
                inc = Path(base) / sub / "include"
                if (inc / "cublas_v2.h").exists():
                    links = scratch / "cublas_include"
                    links.mkdir(parents=True, exist_ok=True)
                    for name in ("cublas_v2.h", "cublas_api.h"):
                        dst = links / name
                        if not dst.exists():
                            dst.symlink_to(inc / name)
                    return [f"-I{links}"]
    except ImportError:
        pass
    raise RawUnavailable(
        "cublas_v2.h not found (ggml's vendors/cuda.h needs it): install the CUDA toolkit's "
        "cuBLAS headers or `pip install nvidia-cublas`"
    )


def _arch() -> str:
    env = os.environ.get("RAW_GGML_ARCH")
    if env:
        return env
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}{minor}"
    return "90"


def build(vendor: Path, out_dir: Path, *, quiet: bool = True) -> Path:
    """Compile the harness into out_dir/<hash>/libraw_ggml.so (cached by content) and return its path."""
    vendor = Path(vendor).resolve()
    missing = [f for f in VENDOR_ENTRIES if not (vendor / f).exists()]
    if missing:
        raise RawUnavailable(
            f"{vendor} lacks {missing[0]} (and {len(missing) - 1} more): run `ggml-vendor sync` "
            "or extract a ggml snapshot into vendor/ggml"
        )
    nvcc = _nvcc()
    arch = _arch()
    gencode = [f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    digest = hashlib.sha256()
    for f in SOURCES + ("raw_common.h",):
        digest.update((HERE / f).read_bytes())
    for folder in VENDOR_HASHED:
        for f in sorted((vendor / folder).glob("*")):
            if f.is_file() and f.suffix in (".h", ".cuh", ".cu"):
                digest.update(f.name.encode() + b"\0" + f.read_bytes())
    digest.update(" ".join(NVCC_FLAGS + tuple(gencode) + (nvcc,)).encode())
    build_dir = Path(out_dir).resolve() / digest.hexdigest()[:16]
    lib = build_dir / "libraw_ggml.so"
    if lib.exists():
        return lib
    build_dir.mkdir(parents=True, exist_ok=True)
    includes = [f"-I{HERE}", f"-I{vendor / 'include'}", f"-I{vendor / 'src'}", f"-I{vendor / 'src' / 'ggml-cuda'}"]
    includes += _cublas_include(nvcc, build_dir)

    def compile_one(src: str) -> Path:
        obj = build_dir / (Path(src).stem + ".o")
        cmd = [nvcc, *NVCC_FLAGS, *gencode, *includes, "-c", str(HERE / src), "-o", str(obj)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RawUnavailable(f"nvcc failed on {src}:\n{' '.join(cmd)}\n{res.stderr[-4000:]}")
        return obj

    # One nvcc per TU in parallel: the FA TU dominates (about 6 s for three head dims).
    with ThreadPoolExecutor(len(SOURCES)) as pool:
        objs = list(pool.map(compile_one, SOURCES))
    tmp = build_dir / "libraw_ggml.so.tmp"
    cmd = [nvcc, "-shared", "-cudart", "shared", *gencode, *map(str, objs), "-o", str(tmp)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RawUnavailable(f"nvcc link failed:\n{' '.join(cmd)}\n{res.stderr[-4000:]}")
    tmp.rename(lib)
    if not quiet:
        print(f"[raw_ggml] built {lib} for sm_{arch}", file=sys.stderr)
    return lib


def pristine_tree(vendor: Path, patches_dir: Path, out_dir: Path) -> tuple[Path, list[str]]:
    """Upstream's unpatched sources: a copy of `vendor` (vendor/ggml) with every vendor/patches/*.patch
    reverse-applied (last first). Returns (the tree, the patch names undone); with no patches it is `vendor`
    itself. Cached by content under out_dir."""
    vendor = Path(vendor).resolve()
    patches_dir = Path(patches_dir).resolve()
    patches = sorted(patches_dir.glob("*.patch")) if patches_dir.is_dir() else []
    if not patches:
        return vendor, []
    digest = hashlib.sha256()
    for f in sorted(vendor.rglob("*")):
        if f.is_file():
            digest.update(f.relative_to(vendor).as_posix().encode() + b"\0" + f.read_bytes())
    for p in patches:
        digest.update(p.name.encode() + b"\0" + p.read_bytes())
    tree = Path(out_dir).resolve() / f"pristine-{digest.hexdigest()[:16]}" / "ggml"
    if tree.is_dir():
        return tree, [p.name for p in patches]
    tmp = tree.parent / "ggml.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(vendor, tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(tmp.parent)
    for p in reversed(patches):
        res = subprocess.run(
            ["git", "apply", "-R", "-p1", "--whitespace=nowarn", str(p)],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise RawUnavailable(
                f"cannot undo {p.name} on vendor/ggml ({res.stderr.strip().splitlines()[0] if res.stderr.strip() else 'git apply -R failed'}): "
                "run `ggml-vendor sync` so vendor/ggml is the pin with its patches"
            )
    tmp.rename(tree)
    return tree, [p.name for p in patches]


class RawGgml:
    """ctypes view of libraw_ggml.so; every call raises RuntimeError with ggml's message on failure."""

    def __init__(self, lib_path: Path):
        self.path = Path(lib_path)
        self.lib = ctypes.CDLL(str(lib_path))
        L = self.lib
        p, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
        L.raw_last_error.restype = ctypes.c_char_p
        L.raw_gdn_launch.argtypes = [p] * 8 + [i64] * 4 + [i64] * 9 + [i64, i64, i32, p]
        L.raw_gdn_launch.restype = i32
        L.raw_gdn_launch_cols.argtypes = [p] * 8 + [i64] * 4 + [i64] * 9 + [i64, i64, i32, p]
        L.raw_gdn_launch_cols.restype = i32
        L.raw_fa_occupancy.argtypes = [i32, ctypes.POINTER(i32)]
        L.raw_fa_occupancy.restype = i32
        L.raw_fa_launch.argtypes = [
            i32,
            p,
            p,
            p,
            p,
            p,
            p,
            p,
            i32,
            f32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            ctypes.c_longlong,
            i32,
            i32,
            ctypes.c_longlong,
            i32,
            i32,
            i32,
            i32,
            i32,
            ctypes.c_longlong,
            p,
        ]
        L.raw_fa_launch.restype = i32
        L.raw_fa_launch_ex.argtypes = [i32, i32, *L.raw_fa_launch.argtypes]
        L.raw_fa_launch_ex.restype = i32
        L.raw_fa_occupancy_ex.argtypes = [i32, i32, i32, ctypes.POINTER(i32)]
        L.raw_fa_occupancy_ex.restype = i32
        L.raw_fa_has_gqa.argtypes = []
        L.raw_fa_has_gqa.restype = i32

    def check(self, rc: int) -> None:
        if rc != 0:
            raise RuntimeError(self.lib.raw_last_error().decode(errors="replace"))

    def fa_occupancy(self, head_dim: int, kv_type: int = 0, ncols2: int = 1) -> int:
        n = ctypes.c_int(0)
        self.check(self.lib.raw_fa_occupancy_ex(head_dim, kv_type, ncols2, ctypes.byref(n)))
        return n.value

    @property
    def fa_has_gqa(self) -> bool:
        """True when the tree's vec kernel has the GQA-grouped form (vendor/patches/0004)."""
        return bool(self.lib.raw_fa_has_gqa())
