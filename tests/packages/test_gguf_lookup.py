"""Serving our GGUF package to transformers' hard-coded lookup, on a CPU, with the real transformers and kernels.

transformers' GGUF path (`integrations/gguf/kernels.py`, byte-identical 5.22.2 -> 5.25.0) loads its kernel with
`get_kernel("ggml-org/ggml-quantization", version=1)` through its own wrapper and has no setting for the repo id.
kernels (0.17.2 and 0.19.1 alike) reads `LOCAL_KERNELS="<repo id>=<directory>"` before it asks the Hub, so one
line pointing that id at a download of the user's own repo (README, "GGUF models") serves our build. Checked
here in fresh processes, offline: with the line, transformers' own call returns the build in the directory; without
it, the same call finds nothing. The directory is a package `ggml-vendor build` made (the built_binding fixture:
the first package against the miniature upstream, a real build: the lookup only needs a build/ directory of
variants), so `get_gguf_kernel` then reports the API it misses; the GGUF package's API against GgufKernel's reads
is tests/packages/test_gguf_kernels.py's, and its numbers tests/gpu/test_gguf_transformers.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

LOOKUP = textwrap.dedent(r"""
    import json, logging
    from transformers.integrations import hub_kernels
    from transformers.integrations.gguf import kernels as gguf

    r = {}
    try:  # transformers' own call, with its hard-coded repo id
        m = hub_kernels.get_kernel("ggml-org/ggml-quantization", version=1)
        r["module"], r["file"] = m.__name__, m.__file__
    except Exception as e:  # noqa: BLE001
        r["error"] = f"{type(e).__name__}: {e}"[:300]
    logs = []
    handler = logging.Handler()
    handler.emit = lambda rec: logs.append(rec.getMessage())
    logging.getLogger(gguf.__name__).addHandler(handler)
    logging.getLogger(gguf.__name__).setLevel(logging.INFO)
    gguf._gguf_kernel = None
    r["gguf_kernel"] = repr(gguf.get_gguf_kernel())
    r["gguf_log"] = logs
    print("RESULT " + json.dumps(r))
""")


def _lookup(env: dict[str, str]) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-c", LOOKUP], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


@pytest.fixture(scope="module")
def transformers_version() -> str:
    try:
        import transformers
        from transformers.utils.import_utils import is_kernels_available
    except ImportError as exc:
        pytest.skip(f"transformers is not importable: {exc}")
    if not is_kernels_available():
        pytest.skip(f"transformers {transformers.__version__} does not accept the installed kernels")
    return transformers.__version__


def test_local_kernels_line_serves_our_build_to_transformers_gguf_lookup(
    built_binding: tuple[Path, dict[str, Any]], transformers_version: str, tmp_path: Path
) -> None:
    root, _ = built_binding
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "KERNELS_CACHE": str(tmp_path / "k")}
    env.pop("LOCAL_KERNELS", None)
    without = _lookup(env)
    built = root / "build" / "ggml-attn-kernels"  # build/<package>/<variant>
    with_line = _lookup({**env, "LOCAL_KERNELS": f"ggml-org/ggml-quantization={built}"})
    # without the line: nothing under that id (offline, empty cache), so transformers would unpack every weight
    assert "module" not in without, without
    assert without["gguf_kernel"] == "False"
    # with it: transformers' own call loads the variant of the build in that directory
    assert with_line["module"].startswith("_ggml_attn_kernels_cuda_"), with_line
    assert with_line["file"].startswith(str(built)), with_line
    # ... and GgufKernel reads that module (this build is the attention package, so it misses the GGUF ops)
    assert with_line["gguf_kernel"] == "False"
    assert any("mul_mat_vec" in line for line in with_line["gguf_log"]), with_line["gguf_log"]
