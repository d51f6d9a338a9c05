"""References for the gguf-kernels tests and benchmarks: the package's own numpy references
(templates/gguf-kernels/reference.py, the ones its conformance cases use: GGUF blocks made by ggml-org's `gguf`
package, their numpy dequantization, ggml's q8_1 activation rounding and the gemv tolerance it implies),
re-exported, plus the loader of the build under test (the tool's own build of the package).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from toolkit.verify.conformance import load_cases

_R = load_cases(Path(__file__).resolve().parents[2] / "templates" / "gguf-kernels" / "reference.py")
TYPES, REQUIRED, QUANTIZABLE, HALF_FIELDS = _R.TYPES, _R.REQUIRED, _R.QUANTIZABLE, _R.HALF_FIELDS
geometry, make_blocks, dequantize, q8_1_roundtrip = _R.geometry, _R.make_blocks, _R.dequantize, _R.q8_1_roundtrip
gemv_reference, _offsets = _R.gemv_reference, _R._offsets


BUILD_TIMEOUT_S = 1800


class BuildFailed(RuntimeError):
    """`ggml-vendor build -p gguf-kernels` failed: the test fails (a build the tool cannot make is a defect)."""


def built_variant(repo: Path) -> Path | None:
    """The tool's build of gguf-kernels for this torch (build/gguf-kernels/<variant>/), or None."""
    import torch

    tag = "torch" + "".join(torch.__version__.split("+")[0].split(".")[:2])
    return next(iter(sorted((Path(repo) / "build" / "gguf-kernels").glob(f"{tag}-*-cu*-*-linux"))), None)


def build(repo: Path) -> None:
    """Build gguf-kernels for this host through the tool (`ggml-vendor build -p gguf-kernels`), the one build
    system; raises BuildFailed with the tool's last line when it cannot."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "toolkit.cli", "build", "-p", "gguf-kernels", "-C", str(repo)]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if res.returncode != 0:
        last = (res.stderr.strip() or res.stdout.strip() or "no output").splitlines()[-1]
        raise BuildFailed(f"ggml-vendor build -p gguf-kernels failed (exit {res.returncode}): {last}")


def load_build(repo: Path, build_missing: bool = False) -> tuple[ModuleType | None, str]:
    """The gguf_kernels module under test, and why not when there is none: the CUDA variant for this torch that
    `ggml-vendor build -p gguf-kernels` wrote under build/gguf-kernels/ (built here first, through the tool, when
    `build_missing` and there is none), loaded with kernels.get_local_kernel (the path a user's code takes).
    Returns (module or None, why not)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None, "torch is not installed"
    if built_variant(repo) is None:
        if not build_missing:
            return None, "no gguf-kernels build for this torch: run `ggml-vendor build -p gguf-kernels`"
        build(repo)
        if built_variant(repo) is None:
            raise BuildFailed("ggml-vendor build -p gguf-kernels succeeded but wrote no variant for this torch")
    import kernels

    return kernels.get_local_kernel(Path(repo) / "build" / "gguf-kernels"), ""
