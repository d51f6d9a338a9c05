"""The conformance gate: run every op of a built variant against its package's own reference of the documented
contract, on the package's fixed cases.

The cases belong to the package, like its op facts: its facts file names a cases module (`CONFORMANCE`, a path
relative to its templates directory, e.g. templates/conformance.py) whose `run_all(mod)` runs every case on the
loaded variant and returns {"device", "torch", "cases": [...]} (each case {"case", "op", "covers", "err",
"tol", "contrast": {wrong contract: its distance}, "ok"}, or {"case", "op", "ok": False, "error"}), or
{"skip": reason}. This module is what holds for any package: it loads the variant in a child process through
`kernels.get_local_kernel` (the path a user's code takes, as the smoke test does: a crash in the kernel cannot
take verify down), runs the package's cases there, and turns their document into verify's finding and the
status the verification record, publish report and Hub card carry. It also gives the cases modules their
common pieces (the device, a case's verdict, an op that raises failing only its case).

A case that can be confused with a plausible wrong contract reports its distance to that contract's answer too,
and must be SEPARATION tolerances away from it, so a silent change cannot pass by accident. The gate runs where
the variant can be loaded and a GPU is present (CUDA, ROCm through torch.cuda, or MPS); elsewhere, or for a
package that declares no cases, the check is SKIP with the reason, and the record, report and card say
"conformance: not run (<reason>)".
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from toolkit.verify.child import run_child
from toolkit.verify.findings import FAIL, PASS, SKIP, Finding

CHECK = "conformance"
TIMEOUT_S = 300
# A wrong contract must be at least this many tolerances away, or the case cannot tell them apart.
SEPARATION = 10.0
DISABLED = "disabled (--no-conformance)"
NO_CASES = "the package declares no conformance cases (CONFORMANCE in its facts.py)"
MARKER = "CONFORMANCE"


# --- for the packages' cases modules -----------------------------------------------------------------------


def device_of(torch: Any) -> str | None:
    """ "cuda" (CUDA or ROCm), "mps", or None when torch sees no GPU."""
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return None


def gpu_present() -> tuple[bool, str]:
    """Whether torch sees a GPU here (CUDA/ROCm or MPS), and why not."""
    try:
        import torch
    except ImportError as exc:
        return False, f"torch is not importable: {exc}"
    if device_of(torch) is None:
        return False, "no GPU on this host (torch sees no CUDA/ROCm or MPS device)"
    return True, ""


def judged(case: str, op: str, covers: str, err: float, tol: float, contrast: dict[str, float]) -> dict[str, Any]:
    """One case's result: ok when the error is under the tolerance and every wrong contract is far away."""
    ok = math.isfinite(err) and err < tol and all(e > SEPARATION * tol for e in contrast.values())
    return {"case": case, "op": op, "covers": covers, "err": err, "tol": tol, "contrast": contrast, "ok": ok}


def guarded(case: str, op: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`run()`, or a failed case naming the exception: an op that raises fails its case, the others still run."""
    try:
        return run()
    except Exception as exc:
        return {"case": case, "op": op, "ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}


def document(torch: Any, device: str, cases: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The cases module's answer: the device it ran on, torch's version and every case's result."""
    name = torch.cuda.get_device_name() if device == "cuda" else device
    return {"device": name, "torch": torch.__version__, "cases": list(cases)}


def load_cases(path: Path) -> ModuleType:
    """A package's cases module, loaded from its file (the child does this; so do the tests)."""
    name = "ggml_vendor_conformance_" + "".join(c if c.isalnum() else "_" for c in str(path.resolve()))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module  # before exec: dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException:
        del sys.modules[name]
        raise
    return module


def sibling(cases_file: str, name: str) -> ModuleType:
    """The module `name`.py next to a cases module (e.g. its float64 references), loaded by path: a package's
    templates directory is not on sys.path, and two packages may each have a reference.py."""
    return load_cases(Path(cases_file).with_name(f"{name}.py"))


# --- the child: runs in a fresh process with the variant loaded ---------------------------------------------

# argv: the variant directory and the package's cases file.
_CHILD = r"""
import json, sys
from pathlib import Path
from kernels import get_local_kernel
from toolkit.verify.conformance import MARKER, load_cases
mod = get_local_kernel(Path(sys.argv[1]))
doc = load_cases(Path(sys.argv[2])).run_all(mod)
print(MARKER + json.dumps(doc), flush=True)
"""


# --- the parent: the verify check ---------------------------------------------------------------------------


def _not_run(variant: str, why: str) -> list[Finding]:
    return [Finding(variant, CHECK, SKIP, f"not run: {why}", "")]


def conformance_check(
    variant: str, path: Path, *, enabled: bool = True, python: str | None = None, cases_file: Path | None = None
) -> list[Finding]:
    """The `conformance` finding of one variant: PASS, FAIL (naming the cases), or SKIP with the reason.
    `cases_file`: the package's cases module (its facts' CONFORMANCE); None: the package declares none."""
    ok, why = runnable_here(variant)
    if not ok:
        return _not_run(variant, why)
    if not enabled:
        return _not_run(variant, DISABLED)
    if cases_file is None:
        return _not_run(variant, NO_CASES)
    toolkit_root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (toolkit_root, os.environ.get("PYTHONPATH", "")) if p),
    }
    child = run_child(_CHILD, [str(path), str(cases_file)], marker=MARKER, timeout=TIMEOUT_S, python=python, env=env)
    if child.timed_out:
        return [
            Finding(variant, CHECK, FAIL, f"the conformance run hung for {TIMEOUT_S}s", "debug the ops on this GPU")
        ]
    if child.doc is None:
        return [
            Finding(
                variant,
                CHECK,
                FAIL,
                f"the conformance run died (exit {child.returncode}): {child.tail}",
                f"load the variant by hand and run {cases_file.name}'s run_all(module) to see the traceback",
            )
        ]
    return [summarise(variant, child.doc)]


def check_after(
    variant: str, path: Path, findings: list[Finding], *, enabled: bool = True, cases_file: Path | None = None
) -> list[Finding]:
    """verify's hook: the conformance finding, unless an earlier check already shows the variant is broken."""
    blocking = [f.check for f in findings if f.failed and f.check in ("layout", "metadata", "binaries", "smoke")]
    if blocking:
        return [Finding(variant, CHECK, SKIP, f"not run: {', '.join(dict.fromkeys(blocking))} failed", "")]
    return conformance_check(variant, path, enabled=enabled, cases_file=cases_file)


def cases_file_of(cfg: Any) -> Path | None:
    """The package's conformance cases: the file its facts' CONFORMANCE names, relative to its templates
    directory (None: the package declares none)."""
    from toolkit.core import package_facts

    rel = package_facts.of(cfg).own.get("CONFORMANCE")
    return cfg.templates_dir / rel if rel else None


def runnable_here(variant: str) -> tuple[bool, str]:
    """Whether this host can run the conformance cases of `variant` (it loads here and a GPU is present)."""
    from toolkit.verify.smoke import host_can_load  # deferred: kernels' resolver is imported only when asked

    ok, why = host_can_load(variant)
    if not ok:
        return False, f"this host cannot load it ({why})"
    return gpu_present()


def summarise(variant: str, doc: dict[str, Any]) -> Finding:
    if "skip" in doc:
        return Finding(variant, CHECK, SKIP, f"not run: {doc['skip']}", "")
    cases = doc.get("cases", [])
    if not cases:
        return Finding(variant, CHECK, FAIL, "the variant exports none of the ops to check", "export the ops")
    bad = [c for c in cases if not c.get("ok")]
    # per op the case nearest its tolerance; the error's unit is the package's (a relative error for the first
    # package, a multiple of the q8_1 rounding bound for gguf-kernels' gemv), so it is shown against its tolerance
    worst: dict[str, tuple[float, float]] = {}
    for c in (c for c in cases if "err" in c):
        e, t = worst.get(c["op"], (0.0, 1.0))
        if c["err"] / c["tol"] >= e / t:
            worst[c["op"]] = (c["err"], c["tol"])
    errs = ", ".join(f"{op} max err {e:.1e} (tolerance {t:.0e})" for op, (e, t) in sorted(worst.items()))
    if bad:
        return Finding(
            variant,
            CHECK,
            FAIL,
            f"{len(bad)} of {len(cases)} cases off the contract on {doc.get('device', '?')}: "
            + "; ".join(_why(c) for c in bad[:4])
            + (f" (+{len(bad) - 4} more)" if len(bad) > 4 else ""),
            "the pinned upstream changed the op's semantics or the binding is wrong: read the drift report "
            "(body changed: review semantics) before publishing",
        )
    return Finding(variant, CHECK, PASS, f"{len(cases)} cases on {doc.get('device', '?')}: {errs}")


def _why(c: dict[str, Any]) -> str:
    if "error" in c:
        return f"{c['case']}: {c['error']}"
    close = [w for w, e in (c.get("contrast") or {}).items() if e <= SEPARATION * c["tol"]]
    if c["err"] >= c["tol"]:
        return f"{c['case']} ({c.get('covers', '')}): rel err {c['err']:.1e} > {c['tol']:.0e}" + (
            f", matches the wrong contract {close[0]}" if close else ""
        )
    return f"{c['case']}: cannot tell it from the wrong contract {', '.join(close)}"


def status_of(findings: Iterable[Finding]) -> str:
    """What the verification record, publish report and card say: "passed: ...", "failed: ..." or
    "not run (<reason>)"."""
    for f in findings:
        if f.check != CHECK:
            continue
        if f.status == PASS:
            return f"passed: {f.message}"
        if f.status == FAIL:
            return f"failed: {f.message}"
        return f"not run ({f.message.removeprefix('not run: ')})"
    return "not run (not part of this verification)"
