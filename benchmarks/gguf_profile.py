"""The launches to look at under a profiler: for each gguf-kernels build given, one mul_mat_vec (q8_1 quantize +
mul_mat_vec_q) and the dequantize calls of the issue's goals (Q4_K 4096×14336 M = 1; Q4_K and Q8_0 to bf16 and
f32), one launch each, in that order, on random blocks.

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \\
        python3 benchmarks/gguf_profile.py base=/tmp/gguf-base/pkg patched=/tmp/gguf-build/pkg

(LABEL=PATH as in benchmarks/gguf_variants.py.) Without a profiler it only runs the calls once.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bench_gguf import rand_blocks  # noqa: E402
from gguf_variants import import_build  # noqa: E402

from tests.helpers import gguf_reference as R  # noqa: E402

N, K = 4096, 14336


def main(argv: list[str]) -> int:
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = {name: rand_blocks(name, N, K, gen) for name in ("Q4_K", "Q8_0")}
    x = torch.randn(1, K, device="cuda", generator=gen)
    for spec in argv:
        label, _, path = spec.partition("=")
        gk = import_build(label, Path(path))
        torch.cuda.synchronize()
        print(f"== {label}: mul_mat_vec Q4_K {N}x{K} M=1; dequantize Q4_K bf16, f32; Q8_0 bf16, f32", flush=True)
        gk.mul_mat_vec(w["Q4_K"], x, R.TYPES["Q4_K"], N)
        for name in ("Q4_K", "Q8_0"):
            for dt in (torch.bfloat16, torch.float32):
                gk.dequantize(w[name], R.TYPES[name], N, K, dt)
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
