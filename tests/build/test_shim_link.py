"""The package's gated-delta-net unit (csrc/cuda/gdn_kernels.cu as render writes it, which #includes the vendored, patched
gated_delta_net.cu) linked with its shim leaves no ggml symbol undefined: the non-static ggml op wrappers compiled
into the extension reference ggml runtime functions (ggml_abort, the CUDA pool factory the chunked prefill path's
workspace comes from upstream, ...), and one the shim lacks only shows up as an ImportError on the GPU machine.
Skipped, with the reason, where nvcc, the vendored tree or the cuBLAS headers are missing."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
pytestmark = pytest.mark.slow


def test_gdn_unit_and_shim_leave_no_ggml_symbol_undefined(tmp_path: Path) -> None:
    vendor = ROOT / "vendor" / "ggml"
    if not (vendor / "src" / "ggml-cuda" / "gated_delta_net.cu").exists():
        pytest.skip("vendor/ggml is not populated (run `ggml-vendor sync`)")
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    # the harness's nvcc and cuBLAS-header discovery (benchmarks/ is a folder of scripts: imported by name)
    loader = importlib.import_module("raw_ggml.loader")

    nvcc = loader._nvcc()
    try:
        cublas = loader._cublas_include(nvcc, tmp_path)
    except loader.RawUnavailable as exc:
        pytest.skip(str(exc).splitlines()[0])
    from toolkit import render
    from toolkit.core import config

    units = tmp_path / "csrc" / "cuda"  # the first package's CUDA units, rendered (never committed)
    units.mkdir(parents=True)
    for f in render.plan(config.load(ROOT)).files:
        if f.path.startswith("csrc/cuda/"):
            (tmp_path / f.path).write_text(f.content)
    includes = [f"-I{vendor / d}" for d in ("include", "src", "src/ggml-cuda")] + [f"-I{units}"]
    flags = [*loader.NVCC_FLAGS, "-gencode", "arch=compute_90,code=sm_90", *includes, *cublas]
    objs = []
    for unit in ("gdn_kernels.cu", "ggml_shim.cu"):
        obj = tmp_path / f"{unit}.o"
        res = subprocess.run([nvcc, *flags, "-c", str(units / unit), "-o", str(obj)],
                             capture_output=True, text=True)  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        objs.append(str(obj))
    lib = tmp_path / "gdn_unit.so"
    res = subprocess.run([nvcc, "-shared", "-cudart", "shared", *objs, "-o", str(lib)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    undefined = subprocess.run(["nm", "-uD", "-C", str(lib)], capture_output=True, text=True, check=True).stdout
    assert [line for line in undefined.splitlines() if "ggml" in line] == []
