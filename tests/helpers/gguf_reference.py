"""References for the gguf-kernels tests and benchmarks: the package's own numpy references
(templates/gguf-kernels/reference.py, the ones its conformance cases use: GGUF blocks made by ggml-org's `gguf`
package, their numpy dequantization, ggml's q8_1 activation rounding and the gemv tolerance it implies),
re-exported, plus the loader of the build under test.
"""

from __future__ import annotations

from pathlib import Path

from toolkit.verify.conformance import load_cases

_R = load_cases(Path(__file__).resolve().parents[2] / "templates" / "gguf-kernels" / "reference.py")
TYPES, REQUIRED, QUANTIZABLE, HALF_FIELDS = _R.TYPES, _R.REQUIRED, _R.QUANTIZABLE, _R.HALF_FIELDS
geometry, make_blocks, dequantize, q8_1_roundtrip = _R.geometry, _R.make_blocks, _R.dequantize, _R.q8_1_roundtrip
gemv_reference, _offsets = _R.gemv_reference, _R._offsets


def load_build(repo):  # type: ignore[no-untyped-def]
    """The gguf_kernels module under test, and why not when there is none: $GGUF_KERNELS_PATH (a folder holding
    gguf_kernels/, e.g. what benchmarks/gguf_local_build.py lays out) imported as `gguf_kernels`, else the CUDA
    variant for this torch that `ggml-vendor build -p gguf-kernels` wrote under build/gguf-kernels/, loaded
    with kernels.get_local_kernel (the path a user's code takes). Returns (module or None, why not)."""
    import importlib
    import os
    import sys
    from pathlib import Path

    path = os.environ.get("GGUF_KERNELS_PATH")
    if path:
        sys.path.insert(0, path)
        return importlib.import_module("gguf_kernels"), ""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    tag = "torch" + "".join(torch.__version__.split("+")[0].split(".")[:2])
    root = Path(repo) / "build" / "gguf-kernels"
    if not any(root.glob(f"{tag}-*-cu*-*-linux/__init__.py")):
        return None, (
            f"no gguf_kernels build for {tag}: set GGUF_KERNELS_PATH (benchmarks/gguf_local_build.py) or run "
            "`ggml-vendor build -p gguf-kernels`"
        )
    import kernels

    return kernels.get_local_kernel(root), ""
