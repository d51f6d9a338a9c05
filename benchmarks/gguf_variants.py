"""Several gguf-kernels builds side by side in one process: the same ggml kernels with different launch
parameters or patches (e.g. the pin's sources against vendor/patches/0005 applied), checked against the first
build and timed.

    python3 benchmarks/gguf_variants.py base=/tmp/gguf-base/pkg patched=/tmp/gguf-build/pkg [--out DIR]

Each PATH is a folder holding gguf_kernels/ (what benchmarks/gguf_local_build.py lays out); each build is
imported under its own module name (the op namespaces are unique per build). Checks, against the first build on
the same inputs: mul_mat_vec for every GEMV_TYPES type, M = 1..8, N = 131 and 4096 (a launch-shape change keeps
each row's partial sums and their reduction order, so the outputs are bit-identical; K = 512 takes ggml's small-K
path, K = 4096 the other), dequantize to f32/f16/bf16
and get_rows for every type (bit-identical). Times: mul_mat_vec at M = 1 and dequantize per type and shape, the
median per call inside one CUDA graph over weight copies beyond L2 (benchmarks/_timing.py), with GB/s and % of
the nominal 4.8 TB/s. Prints the tables and writes gguf_variants.json/.md to --out. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _timing import Timer  # noqa: E402
from bench_gguf import HBM_GBPS, SHAPES, copies, rand_blocks  # noqa: E402

from tests.helpers import gguf_reference as R  # noqa: E402


def import_build(label: str, path: Path):  # type: ignore[no-untyped-def]
    """PATH/gguf_kernels imported as `gguf_kernels_<label>` (relative imports keep working)."""
    pkg = path / "gguf_kernels"
    name = f"gguf_kernels_{label}"
    spec = importlib.util.spec_from_file_location(name, pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical (NaN included: random IQ1_M blocks decode to some NaNs, and NaN != NaN)."""
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
    )


def check(builds: dict, gen: torch.Generator, types: list[str] | None = None) -> list[str]:
    """Bit-identity of every build's outputs with the first build's (of `types`, default all); returns the
    mismatches."""
    (ref_label, ref), *others = builds.items()
    bad = []
    for name, t in R.TYPES.items():
        if types is not None and name not in types:
            continue
        for n, k in ((131, 512), (131, 4096), (4096, 512), (4096, 4096)):  # small K takes ggml's small_k path
            w = rand_blocks(name, n, k, gen)
            if t in ref.GEMV_TYPES:
                for m in range(1, 9):
                    x = torch.randn(m, k, device="cuda", generator=gen)
                    want = ref.mul_mat_vec(w, x, t, n)
                    for label, gk in others:
                        if not same_bits(gk.mul_mat_vec(w, x, t, n), want):
                            bad.append(f"{label} mul_mat_vec {name} {n}x{k} M={m} differs from {ref_label}")
            for dt in (torch.float32, torch.float16, torch.bfloat16):
                want = ref.dequantize(w, t, n, k, dt)
                ids = torch.randint(0, n, (7,), device="cuda", generator=gen)
                rows = ref.get_rows(w, ids, t, k, dt)
                for label, gk in others:
                    if not same_bits(gk.dequantize(w, t, n, k, dt), want):
                        bad.append(f"{label} dequantize {name} {n}x{k} {dt} differs from {ref_label}")
                    if not same_bits(gk.get_rows(w, ids, t, k, dt), rows):
                        bad.append(f"{label} get_rows {name} {n}x{k} {dt} differs from {ref_label}")
    return bad


def time_all(builds: dict, types: list[str], timer: Timer, gen: torch.Generator) -> list[dict]:
    rows = []
    for n, k in SHAPES:
        for name in types:
            t = R.TYPES[name]
            elems, nbytes = R.geometry(name)
            wbytes = n * k // elems * nbytes
            ws = copies(lambda name=name: rand_blocks(name, n, k, gen), wbytes)
            x = torch.randn(1, k, device="cuda", generator=gen)
            row = {"type": name, "n": n, "k": k, "wbytes": wbytes}
            for label, gk in builds.items():
                st = timer.graph_us([lambda w=w, gk=gk: gk.mul_mat_vec(w, x, t, n) for w in ws])
                row[f"{label}:gemv"] = st.median
                for dt in (torch.bfloat16, torch.float32):
                    st = timer.graph_us([lambda w=w, gk=gk, dt=dt: gk.dequantize(w, t, n, k, dt) for w in ws[:4]])
                    row[f"{label}:deq_{str(dt)[6:]}"] = st.median
            rows.append(row)
            del ws
            print("  " + " ".join(f"{key}={v:.1f}" if isinstance(v, float) else f"{v}" for key, v in row.items()),
                  flush=True)  # fmt: skip
    return rows


def tables(rows: list[dict], labels: list[str]) -> str:
    base = labels[0]
    out = []
    for what, title, out_bytes in (
        ("gemv", "mul_mat_vec, M = 1", lambda r: 4 * r["k"] + 4 * r["n"]),
        ("deq_bfloat16", "dequantize → bf16", lambda r: 2 * r["n"] * r["k"]),
        ("deq_float32", "dequantize → f32", lambda r: 4 * r["n"] * r["k"]),
    ):
        head = " | ".join(f"{lb} µs / % HBM" for lb in labels)
        ratios = " | ".join(f"{base} / {lb}" for lb in labels[1:])
        out += ["", f"### {title}", "", f"| type | N×K | {head} | {ratios} |", "|---" * (2 + 2 * len(labels) - 1) + "|"]
        for r in rows:
            moved = r["wbytes"] + out_bytes(r)
            cells = " | ".join(
                f"{r[f'{lb}:{what}']:.1f} / {100 * moved / (r[f'{lb}:{what}'] * 1e-6) / 1e9 / HBM_GBPS:.0f}%"
                for lb in labels
            )
            rat = " | ".join(f"{r[f'{base}:{what}'] / r[f'{lb}:{what}']:.2f}×" for lb in labels[1:])
            out.append(f"| {r['type']} | {r['n']}×{r['k']} | {cells} | {rat} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", help="LABEL=PATH (PATH holds gguf_kernels/); the first is the reference")
    ap.add_argument("--types", default=",".join(R.REQUIRED))
    ap.add_argument("--check-types", default=None, help="comma-separated: the bit-identity check's types (all)")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    args = ap.parse_args(argv)
    builds = {}
    for spec in args.builds:
        label, _, path = spec.partition("=")
        builds[label] = import_build(label, Path(path))
    gen = torch.Generator(device="cuda").manual_seed(0)
    bad = check(builds, gen, args.check_types.split(",") if args.check_types else None)
    print(f"bit-identity against {next(iter(builds))}: {len(bad)} mismatches", flush=True)
    for line in bad[:40]:
        print("  " + line)
    rows = time_all(builds, args.types.split(","), Timer(), gen)
    md = f"{torch.cuda.get_device_name()}, torch {torch.__version__}\n" + tables(rows, list(builds))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gguf_variants.json").write_text(json.dumps({"mismatches": bad, "rows": rows}, indent=1))
    (args.out / "gguf_variants.md").write_text(md + "\n")
    print(md)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
