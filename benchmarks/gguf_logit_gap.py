"""Where the packed GGUF model's logits part from the dequantized model's, layer by layer, and why.

The model is tests/gpu/test_gguf_transformers.py's (benchmarks/gguf_model.py, the same seed, prompt and
teacher-forced tokens). The dequantized load is the reference; the packed load runs with transformers' kernel
cache set to a `GgufKernel` whose ops this script swaps between runs of the same teacher-forced tokens:

  ours              every op from our build (what the test measures);
  gemv exact        mul_mat_vec = gguf's numpy dequantization of the same blocks, float64 matmul (our
                    dequantize / get_rows kept: prefill and embedding);
  gemv ggml-arith   mul_mat_vec = ggml's gemv arithmetic done exactly in float64: x rounded to q8_1 (per 32
                    values, d = amax/127 stored as fp16) and, for Q4_0/Q4_1/Q5_0/Q5_1, each weight block's
                    offset or min multiplied by q8_1's fp16 sum of the *unrounded* x, as vecdotq.cuh does;
  gemv naive-q8     x rounded to q8_1 everywhere (the offset meets sum(xq)): the rounding alone;
  ref unpack        our gemv, with dequantize / get_rows replaced by gguf's numpy reference;
  ggml-arith + noise  the emulation with a random relative difference of 1e-6 on every call (or 1e-3 on the
                    Q4_1 calls): how far the model alone carries differences of that size;
  all reference     every op replaced by gguf's numpy reference (a control: must equal the dequantized model);
  ours, Q4_0/Q4_1 gemv exact   our gemv except for the offset types (exact there);
  ours, x copied    our gemv on a fresh copy of x with a device synchronisation around each call (stale
                    scratch, aliasing or stream-order faults would change the result).

For each: per-layer relative difference of the last position's hidden state against the dequantized model
(max over the steps), the worst step's logit difference, and how many teacher-forced greedy choices agree.
Then an audit of every call our ops make in the `ours` run: each gemv's error against the exact product and
against ggml's arithmetic, per layer, and each dequantize / get_rows against gguf's numpy reference.
`--device cpu` runs the variants that need no GPU (the two emulations and the control).

    ggml-vendor build -p gguf-kernels && python3 benchmarks/gguf_logit_gap.py [--steps 24] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))

import gguf_model  # noqa: E402

from tests.helpers import gguf_reference as R  # noqa: E402

PROMPT = 12  # the end-to-end test's prompt (> MAX_GEMV_ROWS: the prefill takes the dequantize path)
OFFSET_TYPES = {2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1"}
NAMES = {v: k for k, v in R.TYPES.items()}
HALF_PRODUCT_TYPES = (3, 7)  # Q4_1, Q5_1: vecdotq.cuh multiplies (d, m) by (d8, s8) as half2


class Reference:
    """gguf's numpy dequantization of each packed weight, cached, and the gemv emulations built on it."""

    def __init__(self, torch):  # type: ignore[no-untyped-def]
        self.torch = torch
        self.cache: dict = {}

    def weight(self, blocks, t: int):  # type: ignore[no-untyped-def]
        key = (blocks.data_ptr(), tuple(blocks.shape), t)
        if key not in self.cache:
            import gguf

            raw = blocks.detach().cpu().numpy()
            w = np.asarray(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(t)), dtype=np.float64)
            w = w.reshape(raw.shape[0], -1)
            name = gguf.GGMLQuantizationType(t).name
            c = R._offsets(name, raw, raw.shape[0]) if t in OFFSET_TYPES else None
            self.cache[key] = (w, self.torch.from_numpy(w).to(blocks.device), c)
        return self.cache[key]

    def exact(self, blocks, x, t: int, n: int):  # type: ignore[no-untyped-def]
        return (x.double() @ self.weight(blocks, t)[1].T).float()

    def arith(self, blocks, x, t: int, n: int, naive: bool = False, half_products: bool = True):  # type: ignore[no-untyped-def]
        """ggml's gemv arithmetic in float64 (naive: the q8_1 rounding alone, the offset meeting sum(xq))."""
        w, _, c = self.weight(blocks, t)
        xn = x.detach().float().cpu().numpy()
        if t in HALF_PRODUCT_TYPES and half_products and not naive:
            return self.torch.from_numpy(self._half_products(w, c, blocks, t, xn)).float().to(x.device)
        xq = R.q8_1_roundtrip(xn)
        y = xq @ w.T
        if c is not None and not naive:
            s = xn.reshape(xn.shape[0], -1, 32).sum(axis=-1).astype(np.float16).astype(np.float64)
            y = y + (s - xq.reshape(xn.shape[0], -1, 32).sum(axis=-1)) @ c.T
        return self.torch.from_numpy(y).float().to(x.device)

    @staticmethod
    def _half_products(w, m, blocks, t: int, xn):  # type: ignore[no-untyped-def]
        """Q4_1 / Q5_1 as vecdotq.cuh computes them where FAST_FP16_AVAILABLE (sm_60+ but Pascal consumer parts):
        per 32-value block, __hmul2(dm, ds8) rounds d*d8 and m*s8 to fp16 before the integer dot sumi meets
        them: y = sum_b fp16(d d8) sumi + fp16(m s8)."""
        nbytes = {3: 20, 7: 24}[t]
        raw = blocks.detach().cpu().numpy().reshape(w.shape[0], -1, nbytes)
        d = raw[:, :, 0:2].copy().view(np.float16)[..., 0].astype(np.float64)  # (N, B)
        wb = w.reshape(w.shape[0], -1, 32)
        safe = np.where(d > 0, d, 1.0)[..., None]
        q = np.where(d[..., None] > 0, np.round((wb - m[..., None]) / safe), 0.0)  # the weight codes
        xb = xn.reshape(xn.shape[0], -1, 32).astype(np.float32)
        amax = np.abs(xb).max(axis=-1, keepdims=True)
        d8 = amax / np.float32(127.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            q8 = np.where(amax == 0, 0, np.trunc(xb / d8 + np.copysign(np.float32(0.5), xb))).astype(np.float64)
        d8h = d8[..., 0].astype(np.float16).astype(np.float64)  # (M, B)
        s8h = xb.sum(axis=-1).astype(np.float16).astype(np.float64)
        sumi = np.einsum("mbi,nbi->mnb", q8, q)
        dd = (d[None] * d8h[:, None]).astype(np.float16).astype(np.float64)
        ms = (m[None] * s8h[:, None]).astype(np.float16).astype(np.float64)
        return (dd * sumi + ms).sum(axis=-1)

    def dequantize(self, blocks, t: int, rows: int, cols: int, dtype):  # type: ignore[no-untyped-def]
        return self.weight(blocks, t)[1].to(dtype).reshape(rows, cols)

    def get_rows(self, blocks, ids, t: int, cols: int, dtype):  # type: ignore[no-untyped-def]
        return self.weight(blocks, t)[1][ids.long()].to(dtype)


class Audit:
    """Every call of our ops during one run, checked against the reference (per layer)."""

    def __init__(self, gk, ref: Reference, names: dict, half_products: bool = True):  # type: ignore[no-untyped-def]
        self.gk, self.ref, self.names, self.half_products = gk, ref, names, half_products
        self.gemv: dict = {}
        self.unpack: dict = {}

    def mul_mat_vec(self, blocks, x, t, n):  # type: ignore[no-untyped-def]
        y = self.gk.mul_mat_vec(blocks, x, t, n)
        ex = self.ref.exact(blocks, x, t, n).double()
        ar = self.ref.arith(blocks, x, t, n, half_products=self.half_products).double()
        nv = self.ref.arith(blocks, x, t, n, naive=True).double()
        scale = ex.norm().item() or 1.0
        row = self.gemv.setdefault(
            self.names.get(blocks.data_ptr(), "?"),
            {"type": NAMES.get(t, str(t)), "N": n, "K": x.shape[-1], "calls": 0, "ours": 0.0, "arith": 0.0,
             "naive": 0.0, "ours_vs_arith": 0.0, "x_contig": True, "x_align16": True},
        )  # fmt: skip
        row["calls"] += 1
        for key, val in (
            ("ours", y.double() - ex),
            ("arith", ar - ex),
            ("naive", nv - ex),
            ("ours_vs_arith", y.double() - ar),
        ):
            row[key] = max(row[key], val.norm().item() / scale)
        row["x_contig"] &= bool(x.is_contiguous())
        row["x_align16"] &= x.data_ptr() % 16 == 0
        return y

    def _unpack(self, what, out, want, blocks):  # type: ignore[no-untyped-def]
        err = (out.double() - want.double()).abs().max().item() / (want.double().abs().max().item() or 1.0)
        key = (what, self.names.get(blocks.data_ptr(), "?"))
        self.unpack[key] = max(self.unpack.get(key, 0.0), err)
        return out

    def dequantize(self, blocks, t, rows, cols, dtype):  # type: ignore[no-untyped-def]
        out = self.gk.dequantize(blocks, t, rows, cols, dtype)
        return self._unpack("dequantize", out, self.ref.dequantize(blocks, t, rows, cols, dtype), blocks)

    def get_rows(self, blocks, ids, t, cols, dtype):  # type: ignore[no-untyped-def]
        out = self.gk.get_rows(blocks, ids, t, cols, dtype)
        return self._unpack("get_rows", out, self.ref.get_rows(blocks, ids, t, cols, dtype), blocks)


def variants(gk, ref: Reference, torch) -> dict:  # type: ignore[no-untyped-def]
    """name -> (mul_mat_vec, dequantize, get_rows) for the packed model's kernel."""
    out = {}
    if gk is not None:
        out["ours"] = (gk.mul_mat_vec, gk.dequantize, gk.get_rows)

        def copied(blocks, x, t, n):  # type: ignore[no-untyped-def]
            torch.cuda.synchronize()
            y = gk.mul_mat_vec(blocks, x.detach().clone(), t, n)
            torch.cuda.synchronize()
            return y.clone()

        out["ours, x copied"] = (copied, gk.dequantize, gk.get_rows)
        out["gemv exact"] = (ref.exact, gk.dequantize, gk.get_rows)
        out["gemv ggml-arith"] = (ref.arith, gk.dequantize, gk.get_rows)
        out["gemv ggml-arith, f32 products"] = (
            lambda b, x, t, n: ref.arith(b, x, t, n, half_products=False),
            gk.dequantize,
            gk.get_rows,
        )
        out["ref unpack"] = (gk.mul_mat_vec, ref.dequantize, ref.get_rows)

        def offsets_exact(blocks, x, t, n):  # type: ignore[no-untyped-def]
            return (ref.exact if t in OFFSET_TYPES else gk.mul_mat_vec)(blocks, x, t, n)

        out["ours, Q4_0/Q4_1 gemv exact"] = (offsets_exact, gk.dequantize, gk.get_rows)
    unpack = (gk.dequantize, gk.get_rows) if gk is not None else (ref.dequantize, ref.get_rows)
    out["gemv naive-q8"] = (lambda b, x, t, n: ref.arith(b, x, t, n, naive=True), *unpack)
    if gk is None:
        out["gemv ggml-arith"] = (ref.arith, *unpack)
        out["gemv ggml-arith, f32 products"] = (lambda b, x, t, n: ref.arith(b, x, t, n, half_products=False), *unpack)
    out["all reference"] = (ref.exact, ref.dequantize, ref.get_rows)
    # How much the model amplifies a per-call difference of the size left between our gemv and the emulation.
    gen = torch.Generator().manual_seed(0)

    def noisy(rel: float, only=None):  # type: ignore[no-untyped-def]
        def mmv(blocks, x, t, n):  # type: ignore[no-untyped-def]
            y = ref.arith(blocks, x, t, n)
            if only is None or t in only:
                noise = torch.randn(y.shape, generator=gen).to(y.device)
                y = y + rel * y.norm() / max(1, y.numel()) ** 0.5 * noise
            return y

        return (mmv, *unpack)

    out["ggml-arith + 1e-6 noise"] = noisy(1e-6)
    out["ggml-arith + 1e-3 noise on Q4_1"] = noisy(1e-3, only=(3,))
    return out


def set_kernel(hk, ops, gemv_types) -> None:  # type: ignore[no-untyped-def]
    mmv, deq, rows = ops
    ns = types.SimpleNamespace(mul_mat_vec=mmv, dequantize=deq, get_rows=rows, mul_mat_id=None, GEMV_TYPES=gemv_types)
    hk._gguf_kernel = hk.GgufKernel(ns)


def load(file: Path, device: str, torch):  # type: ignore[no-untyped-def]
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(file.parent),
        gguf_file=file.name,
        dtype=torch.float32,
        device_map=device,
        attn_implementation="sdpa",
        use_kernels=False,  # transformers 5.25 would otherwise fetch its default mapping's Hub repos
    )
    return model.eval()


def teacher_forced(model, prompt, tokens, torch):  # type: ignore[no-untyped-def]
    """(steps, vocab) logits and (steps, layers + 1, hidden) last-position hidden states, one token per step."""
    logits, hidden = [], []
    with torch.no_grad():
        out = model(input_ids=prompt, use_cache=True, output_hidden_states=True)
        for step in range(len(tokens)):
            logits.append(out.logits[0, -1].double())
            hidden.append(torch.stack([h[0, -1].double() for h in out.hidden_states]))
            if step == len(tokens) - 1:
                break
            tok = tokens[step].view(1, 1)
            out = model(input_ids=tok, past_key_values=out.past_key_values, use_cache=True, output_hidden_states=True)
    return torch.stack(logits), torch.stack(hidden)


def compare(ld, hd, lp, hp) -> dict:  # type: ignore[no-untyped-def]
    rel_h = ((hp - hd).norm(dim=-1) / hd.norm(dim=-1).clamp_min(1e-30)).cpu()  # (steps, layers + 1)
    rel_l = ((lp - ld).norm(dim=-1) / ld.norm(dim=-1)).cpu()
    agree = (lp.argmax(-1) == ld.argmax(-1)).sum().item()
    return {
        "hidden_max": rel_h.max(dim=0).values.tolist(),
        "hidden_step1": rel_h[min(1, len(rel_h) - 1)].tolist(),
        "logit_step0": rel_l[0].item(),
        "logit_worst": rel_l.max().item(),
        "logit_median": rel_l.median().item(),
        "argmax_agree": agree,
        "steps": len(rel_l),
    }


def module_names(model) -> dict:  # type: ignore[no-untyped-def]
    from transformers.integrations.gguf.utils import GgufEmbedding, GgufLinear

    names = {}
    for name, mod in model.named_modules():
        if isinstance(mod, (GgufLinear, GgufEmbedding)):
            names[mod.weight.data_ptr()] = name.replace("model.layers.", "L")
    return names


def print_tables(results: dict, audit: Audit | None, layers: int) -> None:
    cols = ["emb"] + [f"L{i}" for i in range(layers - 1)] + ["final(norm)"]
    print("\n## per-layer hidden-state rel. difference vs the dequantized model (max over steps)\n")
    print("| variant | " + " | ".join(cols) + " | logits step 0 | logits median | logits worst | argmax agree |")
    print("|---" * (len(cols) + 5) + "|")
    for name, r in results.items():
        hs = " | ".join(f"{v:.2e}" for v in r["hidden_max"])
        print(
            f"| {name} | {hs} | {r['logit_step0']:.2e} | {r['logit_median']:.3g} | {r['logit_worst']:.3g} | "
            f"{r['argmax_agree']}/{r['steps']} |"
        )
    if audit is None:
        return
    print("\n## audit of our gemv calls in the `ours` run (max over calls; errors relative to |exact product|)\n")
    print(
        "| layer | type | N | K | calls | ours vs exact | ggml-arith vs exact | naive-q8 vs exact | ours vs ggml-arith | x contiguous | x 16-B aligned |"
    )
    print("|---" * 11 + "|")
    for name, row in audit.gemv.items():
        print(
            f"| {name} | {row['type']} | {row['N']} | {row['K']} | {row['calls']} | {row['ours']:.2e} | "
            f"{row['arith']:.2e} | {row['naive']:.2e} | {row['ours_vs_arith']:.2e} | {row['x_contig']} | {row['x_align16']} |"
        )
    print("\n## audit of dequantize / get_rows (max |ours - gguf numpy| / max |ref|)\n")
    for (what, name), err in sorted(audit.unpack.items()):
        print(f"  {what:10s} {name:40s} {err:.2e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=24, help="teacher-forced steps (the test's 24 new tokens)")
    ap.add_argument("--device", default="cuda", help="cuda (all variants) or cpu (the emulations only)")
    ap.add_argument("--variant", action="append", default=[], help="run only this variant (repeatable)")
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    args = ap.parse_args(argv)
    import torch
    from transformers.integrations.gguf import kernels as hk

    gk = None
    if args.device != "cpu":
        gk, why = R.load_build(REPO)
        if gk is None:
            print(f"error: no gguf_kernels build ({why})", file=sys.stderr)
            return 1
    print(
        "torch",
        torch.__version__,
        "tf32 matmul",
        torch.backends.cuda.matmul.allow_tf32,
        "cudnn tf32",
        torch.backends.cudnn.allow_tf32,
    )
    file = Path(tempfile.mkdtemp(prefix="gguf-logit-gap-")) / "tiny-qwen35.gguf"
    gguf_model.write(file)
    ref = Reference(torch)
    gemv_types = tuple(gk.GEMV_TYPES) if gk is not None else (2, 3, 8, 12, 14)
    hk._gguf_kernel = False
    deq = load(file, args.device, torch)
    set_kernel(hk, (ref.exact, ref.dequantize, ref.get_rows), gemv_types)
    packed = load(file, args.device, torch)
    gen = torch.Generator().manual_seed(3)  # the test's prompt and its greedy tokens from the dequantized model
    prompt = torch.randint(2, deq.config.vocab_size, (1, PROMPT), generator=gen).to(args.device)
    with torch.no_grad():
        ref_tokens = deq.generate(prompt, max_new_tokens=args.steps, min_new_tokens=args.steps, do_sample=False)[
            0, PROMPT:
        ]
    ld, hd = teacher_forced(deq, prompt, ref_tokens, torch)
    results, audit = {}, None
    for name, ops in variants(gk, ref, torch).items():
        if args.variant and name not in args.variant:
            continue
        if name == "ours":
            audit = Audit(gk, ref, module_names(packed))
            ops = (audit.mul_mat_vec, audit.dequantize, audit.get_rows)
        set_kernel(hk, ops, gemv_types)
        lp, hp = teacher_forced(packed, prompt, ref_tokens, torch)
        results[name] = compare(ld, hd, lp, hp)
        print(f"  {name}: logits worst {results[name]['logit_worst']:.3g}", flush=True)
    print_tables(results, audit, deq.config.num_hidden_layers)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        blob = {"variants": results, "gemv_audit": audit.gemv if audit else {}}
        blob["unpack_audit"] = {f"{k[0]} {k[1]}": v for k, v in (audit.unpack.items() if audit else [])}
        (args.out / "gguf_logit_gap.json").write_text(json.dumps(blob, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
