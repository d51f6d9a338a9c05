"""Import smoke test: load the variant through `kernels.get_local_kernel` in a fresh process (the path a
user's code takes) whenever this host can load it, and check its op namespace has registered ops."""

from __future__ import annotations

from pathlib import Path

from toolkit.core.kernels_client import host_accepts
from toolkit.verify.child import run_child
from toolkit.verify.findings import FAIL, PASS, SKIP, Finding

TIMEOUT_S = 180

# Runs in the child: a crash (bad ELF, missing symbol, abort in a static initializer) cannot take verify down.
_CHILD = r"""
import json, sys
from pathlib import Path
import torch
from kernels import get_local_kernel
path, ident = Path(sys.argv[1]), sys.argv[2]
mod = get_local_kernel(path)
names = getattr(mod, "__all__", [])
missing = [n for n in names if not hasattr(mod, n)]
ops = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith(ident + "::"))
print("SMOKE" + json.dumps({"module": mod.__name__, "all": list(names), "missing": missing, "ops": ops}))
"""


def host_can_load(variant: str) -> tuple[bool, str]:
    """Whether the installed kernels client's own resolver accepts this variant on this machine, and why not."""
    return host_accepts(variant)


def smoke_test(variant: str, path: Path, ident: str, *, python: str | None = None) -> list[Finding]:
    ok, why = host_can_load(variant)
    if not ok:
        return [Finding(variant, "smoke", SKIP, f"this host cannot load it: {why}", "")]
    child = run_child(_CHILD, [str(path), ident], marker="SMOKE", timeout=TIMEOUT_S, python=python)
    if child.timed_out:
        return [Finding(variant, "smoke", FAIL, f"importing the variant hung for {TIMEOUT_S}s", "debug the import")]
    info = child.doc
    if info is None:
        return [
            Finding(
                variant,
                "smoke",
                FAIL,
                f"get_local_kernel failed (exit {child.returncode}): {child.tail}",
                "run python -c 'import kernels; kernels.get_local_kernel(Path(...))' to see the traceback",
            )
        ]
    if info["missing"]:
        return [
            Finding(
                variant,
                "smoke",
                FAIL,
                f"__all__ names missing from the module: {info['missing']}",
                "export what __all__ lists",
            )
        ]
    if not info["ops"]:
        return [
            Finding(
                variant,
                "smoke",
                FAIL,
                f"imported, but no op is registered under {ident}::",
                "register ops with TORCH_LIBRARY under the build's namespace",
            )
        ]
    return [
        Finding(
            variant,
            "smoke",
            PASS,
            f"get_local_kernel imports it as {info['module']}; {len(info['ops'])} ops under {ident}::",
        )
    ]
