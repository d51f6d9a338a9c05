"""The conformance gate: run every op of a built variant against the package's own float64 reference of the
documented contract (toolkit.verify.reference) on a fixed set of small shapes.

A signature fingerprint cannot see ggml transpose its state or reverse its snapshot order under the same
parameter list (docs/upstream.md §4.1); this can. Each case names the part of the contract it pins down, and
the cases that can be confused with a plausible wrong contract (grouped instead of tiled GQA, a [key][value]
state, an unscaled output, linear instead of log-domain gates) also require the result to be far from that
wrong contract's answer, so a silent change cannot pass by accident.

The variant is loaded in a child process through `kernels.get_local_kernel`, the path a user's code takes
(as the smoke test does): a crash in the kernel cannot take verify down. It runs where the variant can be
loaded and a GPU is present (CUDA, ROCm through torch.cuda, or MPS); elsewhere the check is SKIP with the
reason, and the verification record, publish report and Hub card say "conformance: not run (<reason>)".
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.verify.findings import FAIL, PASS, SKIP, Finding

CHECK = "conformance"
TIMEOUT_S = 300
GDN_TOL = 2e-5  # f32 recurrence vs float64; ~1e-7 measured on an H200 (docs/gpu-results.md)
FA_TOL = 2e-3  # f16 K/V products as ggml accumulates them; ~1e-4 measured
# A wrong contract must be at least this many tolerances away, or the case cannot tell them apart.
SEPARATION = 10.0
DISABLED = "disabled (--no-conformance)"


@dataclass(frozen=True)
class GdnCase:
    name: str
    covers: str
    B: int
    T: int
    Hk: int
    H: int
    D: int
    kda: bool = False
    gate_scale: float = 1.0  # spread of the log-domain gates (larger: some gates near exp(-big))
    contrast: tuple[str, ...] = ()  # wrong contracts the result must be far from


@dataclass(frozen=True)
class FaCase:
    name: str
    covers: str
    B: int
    H: int
    Hkv: int
    n_q: int
    n_kv: int
    D: int
    dtype: str = "float16"
    mask: str = "none"  # "none" | "additive" | "bool" | "broadcast"
    scale: float | None = None  # None: the op's default 1/sqrt(D)
    contrast: tuple[str, ...] = ()


GDN_CASES: tuple[GdnCase, ...] = (
    GdnCase("gdn-decode", "one token, state [value][key] in and out", 2, 1, 4, 4, 128, contrast=("state-kv",)),
    GdnCase("gdn-tokens", "a run of tokens in one dispatch, state carried", 2, 9, 2, 2, 64, contrast=("state-kv",)),
    GdnCase("gdn-tiled-gqa", "value head h reads q/k head h % H_k (tiled)", 2, 3, 2, 8, 64, contrast=("grouped",)),
    GdnCase("gdn-kda", "per-key-channel gates (KDA), (B, T, H, D)", 2, 4, 4, 4, 64, kda=True, contrast=("state-kv",)),
    GdnCase(
        "gdn-log-gates",
        "g is log-domain: the kernel exponentiates it",
        1,
        6,
        2,
        2,
        32,
        gate_scale=3.0,
        contrast=("linear-gate",),
    ),
    GdnCase("gdn-scale", "the output carries 1/sqrt(head_dim)", 1, 2, 2, 2, 16, contrast=("unscaled",)),
)

FA_CASES: tuple[FaCase, ...] = (
    FaCase("fa-nkv-300", "n_kv not a multiple of 256 (ggml's KQ stride)", 1, 8, 2, 1, 300, 128),
    FaCase("fa-additive-mask", "additive mask, n_q = 2", 2, 8, 2, 2, 1000, 128, mask="additive"),
    FaCase("fa-bool-mask", "bool mask (True = attend), n_kv = 257", 1, 4, 4, 3, 257, 64, mask="bool"),
    FaCase("fa-broadcast-mask", "mask shared by the batch (1, 1, n_q, n_kv)", 2, 8, 2, 1, 700, 128, mask="broadcast"),
    FaCase("fa-grouped-gqa", "query head h reads kv head h // (H / H_kv)", 1, 16, 4, 1, 512, 128, contrast=("tiled",)),
    FaCase(
        "fa-scale-bf16",
        "an explicit scale; bf16 K/V; head_dim 256",
        1,
        8,
        4,
        5,
        513,
        256,
        dtype="bfloat16",
        mask="additive",
        scale=0.7 / math.sqrt(256),
        contrast=("default-scale",),
    ),
)


# --- the child: runs in a fresh process with the variant loaded ---------------------------------------


def _device(torch: Any) -> str | None:
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
    if _device(torch) is None:
        return False, "no GPU on this host (torch sees no CUDA/ROCm or MPS device)"
    return True, ""


def _gdn_inputs(torch: Any, c: GdnCase, seed: int):
    gen = torch.Generator().manual_seed(seed)
    F = torch.nn.functional

    def randn(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float32)

    q = F.normalize(randn(c.B, c.T, c.Hk, c.D), dim=-1)
    k = F.normalize(randn(c.B, c.T, c.Hk, c.D), dim=-1)
    v = randn(c.B, c.T, c.H, c.D)
    gshape = (c.B, c.T, c.H, c.D) if c.kda else (c.B, c.T, c.H)
    g = F.logsigmoid(c.gate_scale * randn(*gshape) + 2.0)
    beta = torch.sigmoid(randn(c.B, c.T, c.H))
    state = 0.5 * randn(c.B, c.H, c.D, c.D)  # not symmetric: [value][key] and [key][value] differ
    return q, k, v, g, beta, state


def run_gdn_case(torch: Any, mod: Any, c: GdnCase, device: str, seed: int) -> dict[str, Any]:
    from toolkit.verify.reference import gdn_reference, rel_err

    if not mod.supports_gated_delta_net(c.D):
        return {"case": c.name, "op": "gated_delta_net", "ok": False, "error": f"head_dim {c.D} not supported"}
    inputs = _gdn_inputs(torch, c, seed)
    q, k, v, g, beta, state = inputs
    ref_out, ref_state = gdn_reference(torch, *inputs)
    out, final = mod.gated_delta_net(*(x.to(device) for x in inputs))
    if device == "cuda":
        torch.cuda.synchronize()
    out, final = out.cpu(), final.cpu()
    finite = bool(torch.isfinite(out).all() and torch.isfinite(final).all())
    err = max(rel_err(out, ref_out), rel_err(final, ref_state)) if finite else float("inf")
    result: dict[str, Any] = {"case": c.name, "op": "gated_delta_net", "covers": c.covers, "err": err, "tol": GDN_TOL}
    contrasts = {}
    for wrong in c.contrast:
        if wrong == "grouped":
            w_out, w_state = gdn_reference(torch, *inputs, gqa="grouped")
        elif wrong == "state-kv":  # the same maths with the state read and written [key][value]
            w_out, w_state = gdn_reference(torch, q, k, v, g, beta, state.transpose(-1, -2))
            w_state = w_state.transpose(-1, -2)
        elif wrong == "linear-gate":
            w_out, w_state = gdn_reference(torch, *inputs, gate="linear")
        elif wrong == "unscaled":
            w_out, w_state = ref_out * math.sqrt(c.D), ref_state
        else:
            raise ValueError(wrong)
        contrasts[wrong] = max(rel_err(out, w_out), rel_err(final, w_state)) if finite else float("inf")
    result["contrast"] = contrasts
    result["ok"] = finite and err < GDN_TOL and all(e > SEPARATION * GDN_TOL for e in contrasts.values())
    return result


def _fa_inputs(torch: Any, c: FaCase, seed: int):
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, c.dtype)
    q = torch.randn(c.B, c.H, c.n_q, c.D, generator=gen)
    k = torch.randn(c.B, c.Hkv, c.n_kv, c.D, generator=gen).to(dtype)
    v = torch.randn(c.B, c.Hkv, c.n_kv, c.D, generator=gen).to(dtype)
    mask = None
    if c.mask != "none":
        keep = torch.rand(c.B, 1, c.n_q, c.n_kv, generator=gen) > 0.25
        keep[..., 0] = True  # never a fully masked row
        if c.mask == "broadcast":
            keep = keep[:1]
        mask = keep if c.mask == "bool" else torch.where(keep, 0.0, float("-inf")).to(torch.float16)
    return q, k, v, mask


def run_fa_case(torch: Any, mod: Any, c: FaCase, device: str, seed: int) -> dict[str, Any]:
    from toolkit.verify.reference import fa_reference, rel_err

    if not mod.supports_flash_attn(c.n_q, c.D, c.D):
        return {"case": c.name, "op": "flash_attn", "ok": False, "error": f"n_q {c.n_q}, head_dim {c.D} not supported"}
    q, k, v, mask = _fa_inputs(torch, c, seed)
    scale = c.scale if c.scale is not None else 1.0 / math.sqrt(c.D)
    ref = fa_reference(torch, q, k, v, mask, scale)
    args = [x.to(device) if x is not None else None for x in (q, k, v, mask)]
    out = mod.flash_attn(*args, c.scale) if c.scale is not None else mod.flash_attn(*args)
    if device == "cuda":
        torch.cuda.synchronize()
    out = out.cpu()
    finite = bool(torch.isfinite(out).all())
    err = rel_err(out, ref) if finite else float("inf")
    contrasts = {}
    for wrong in c.contrast:
        if wrong == "tiled":
            w = fa_reference(torch, q, k, v, mask, scale, gqa="tiled")
        elif wrong == "default-scale":
            w = fa_reference(torch, q, k, v, mask, 1.0 / math.sqrt(c.D))
        else:
            raise ValueError(wrong)
        contrasts[wrong] = rel_err(out, w) if finite else float("inf")
    ok = finite and err < FA_TOL and all(e > SEPARATION * FA_TOL for e in contrasts.values())
    return {
        "case": c.name,
        "op": "flash_attn",
        "covers": c.covers,
        "err": err,
        "tol": FA_TOL,
        "contrast": contrasts,
        "ok": ok,
    }


def run_all(mod: Any, ops: Iterable[str]) -> dict[str, Any]:
    """Every case of the ops `mod` exports; {"device": ..., "cases": [...]} or {"skip": reason}."""
    import torch

    device = _device(torch)
    if device is None:
        return {"skip": "no GPU on this host (torch sees no CUDA/ROCm or MPS device)"}
    ops = set(ops)
    every: tuple[GdnCase | FaCase, ...] = (*GDN_CASES, *FA_CASES)
    cases = [
        run_case(torch, mod, c, device)
        for c in every
        if ("gated_delta_net" if isinstance(c, GdnCase) else "flash_attn") in ops
    ]
    name = torch.cuda.get_device_name() if device == "cuda" else device
    return {"device": name, "torch": torch.__version__, "cases": cases}


def run_case(torch: Any, mod: Any, c: GdnCase | FaCase, device: str) -> dict[str, Any]:
    """One case with its fixed seed; an op that raises fails its case (the others still run)."""
    gdn = isinstance(c, GdnCase)
    seed = (1000 + GDN_CASES.index(c)) if gdn else (2000 + FA_CASES.index(c))
    try:
        if gdn:
            return run_gdn_case(torch, mod, c, device, seed)  # type: ignore[arg-type]
        return run_fa_case(torch, mod, c, device, seed)  # type: ignore[arg-type]
    except Exception as exc:
        op = "gated_delta_net" if gdn else "flash_attn"
        return {"case": c.name, "op": op, "ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}


# argv: the variant directory, then (optional) a package's own cases file: a module whose run_all(mod) returns
# the same document as run_all here ({"device", "cases": [{"case", "op", "ok", "err", "tol", ...}]} or {"skip"}).
_CHILD = r"""
import importlib.util, json, sys
from pathlib import Path
from kernels import get_local_kernel
mod = get_local_kernel(Path(sys.argv[1]))
if len(sys.argv) > 2:
    spec = importlib.util.spec_from_file_location("ggml_vendor_package_conformance", sys.argv[2])
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    doc = cases.run_all(mod)
else:
    from toolkit.verify.conformance import run_all
    doc = run_all(mod, [n for n in ("gated_delta_net", "flash_attn") if hasattr(mod, n)])
print("CONFORMANCE" + json.dumps(doc), flush=True)
"""


# --- the parent: the verify check ---------------------------------------------------------------------


def conformance_check(
    variant: str, path: Path, *, enabled: bool = True, python: str | None = None, cases_file: Path | None = None
) -> list[Finding]:
    """The `conformance` finding of one variant: PASS, FAIL (naming the cases), or SKIP with the reason.
    `cases_file`: the package's own cases (its facts' CONFORMANCE), else this module's GDN/FA cases."""
    from toolkit.verify.smoke import host_can_load

    ok, why = host_can_load(variant)
    if not ok:
        return [Finding(variant, CHECK, SKIP, f"not run: this host cannot load it ({why})", "")]
    gpu, why = gpu_present()
    if not gpu:
        return [Finding(variant, CHECK, SKIP, f"not run: {why}", "")]
    if not enabled:
        return [Finding(variant, CHECK, SKIP, f"not run: {DISABLED}", "")]
    toolkit_root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONDONTWRITEBYTECODE": "1",  # never leave __pycache__ inside the variant
        "PYTHONPATH": os.pathsep.join(p for p in (toolkit_root, os.environ.get("PYTHONPATH", "")) if p),
    }
    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", _CHILD, str(path), *([str(cases_file)] if cases_file else [])],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return [
            Finding(variant, CHECK, FAIL, f"the conformance run hung for {TIMEOUT_S}s", "debug the ops on this GPU")
        ]
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CONFORMANCE")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return [
            Finding(
                variant,
                CHECK,
                FAIL,
                f"the conformance run died (exit {proc.returncode}): {tail}",
                "run the GPU tests (pytest -m gpu tests/gpu/test_ops.py) to see where",
            )
        ]
    doc = json.loads(line[len("CONFORMANCE") :])
    return [summarise(variant, doc)]


def check_after(
    variant: str, path: Path, findings: list[Finding], *, enabled: bool = True, cases_file: Path | None = None
) -> list[Finding]:
    """verify's hook: the conformance finding, unless an earlier check already shows the variant is broken."""
    blocking = [f.check for f in findings if f.failed and f.check in ("layout", "metadata", "binaries", "smoke")]
    if blocking:
        return [Finding(variant, CHECK, SKIP, f"not run: {', '.join(dict.fromkeys(blocking))} failed", "")]
    return conformance_check(variant, path, enabled=enabled, cases_file=cases_file)


def cases_file_of(cfg: Any) -> Path | None:
    """The package's own conformance cases: the file its facts' CONFORMANCE names, relative to its templates
    directory (None: the GDN/FA cases of this module, the first package's)."""
    from toolkit.core import package_facts

    rel = package_facts.of(cfg).own.get("CONFORMANCE")
    return cfg.templates_dir / rel if rel else None


def runnable_here(variant: str) -> tuple[bool, str]:
    """Whether this host can run the conformance cases of `variant` (it loads here and a GPU is present)."""
    from toolkit.verify.smoke import host_can_load

    ok, why = host_can_load(variant)
    if not ok:
        return False, f"this host cannot load it ({why})"
    return gpu_present()


def recorded_status(build_dir: Path, variant: str) -> str:
    """The conformance status verify recorded for `variant` in the verification record."""
    from toolkit.verify import record

    return record.conformance_status(build_dir, variant)


def summarise(variant: str, doc: dict[str, Any]) -> Finding:
    if "skip" in doc:
        return Finding(variant, CHECK, SKIP, f"not run: {doc['skip']}", "")
    cases = doc.get("cases", [])
    if not cases:
        return Finding(variant, CHECK, FAIL, "the variant exports none of the ops to check", "export the ops")
    bad = [c for c in cases if not c.get("ok")]
    worst: dict[str, float] = {}
    for c in cases:
        if "err" in c:
            worst[c["op"]] = max(worst.get(c["op"], 0.0), c["err"])
    errs = ", ".join(f"{op} max rel err {e:.1e}" for op, e in sorted(worst.items()))
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
