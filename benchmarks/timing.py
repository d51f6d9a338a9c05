"""Timing helpers shared by the benchmarks: device time with host overhead hidden, CUDA-graph time, Python loop time.

Why three numbers (docs/perf-reference.md §1): small ops are host-bound, so event timing around
a single Python call measures Python, not the GPU (triton's do_bench alone shows 42-130 µs for a 3.7 µs kernel).
* hidden: flush L2, spin the GPU (torch.cuda._sleep) for longer than the host needs to enqueue the call, then put
  events around the call. The launches queue up behind the spin, so the events see device time only, with the
  gaps between the call's kernels included.
* graph: N calls over N distinct input sets captured in one CUDA graph (working set beyond L2), replay ÷ N.
* loop: back-to-back calls from Python, wall time ÷ calls: max(host, device), what an eager decode loop sees.
No number here is ever asserted: the scripts print ratios and targets beside them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

Fn = Callable[[], object]

L2_FLUSH_BYTES = 256 << 20
# Calls whose enqueue takes longer than this fill CUDA's launch queue (about a thousand launches), so the
# spin cannot hide them (docs/perf-reference.md §4.2): their "hidden" number would be host time.
HIDE_LIMIT_US = 20_000.0


@dataclass
class Stat:
    """A timing in µs with its spread; `note` says why a number is missing or what it means."""

    median: float | None
    p10: float | None = None
    p90: float | None = None
    n: int = 0
    note: str = ""

    def fmt(self, digits: int = 1) -> str:
        if self.median is None:
            return "–"
        return f"{self.median:.{digits}f}"


@dataclass
class Timer:
    """Holds the L2-flush buffer and the spin calibration for one device."""

    device: torch.device = field(default_factory=lambda: torch.device("cuda"))
    cycles_per_us: float = 0.0
    _flush: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=self.device)
        self._flush.fill_(0x5A5A5A5A)
        self.calibrate()

    def flush_l2(self) -> None:
        self._flush.bitwise_not_()

    def calibrate(self) -> None:
        """SM cycles per µs for torch.cuda._sleep, measured after warming the clock up."""
        for _ in range(3):
            torch.cuda._sleep(2_000_000)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 4_000_000
        s.record()
        torch.cuda._sleep(cycles)
        e.record()
        e.synchronize()
        self.cycles_per_us = cycles / (s.elapsed_time(e) * 1000.0)

    def host_us(self, fn: Fn, n: int = 10) -> Stat:
        """Host time to enqueue one call (the GPU idle beforehand), median and p90 over n calls."""
        xs = []
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            xs.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        return _stat(xs)

    def hidden_us(self, fn: Fn, samples: int = 30, host: Stat | None = None) -> Stat:
        """Device µs of one call with host overhead hidden and a cold L2 (see module docstring)."""
        host = host or self.host_us(fn)
        if host.p90 is not None and host.p90 > HIDE_LIMIT_US:
            return Stat(None, note=f"host-bound: enqueue takes {host.median / 1000:.1f} ms, the spin cannot hide it")
        # Generous margin: the spin is sized in cycles at the calibrated clock, and the clock can move.
        spin_cycles = int((3.0 * host.p90 + 50.0) * self.cycles_per_us)
        xs, late = [], 0
        for _ in range(samples):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.flush_l2()
            torch.cuda._sleep(spin_cycles)
            s.record()
            fn()
            e.record()
            # If the GPU already passed the start event when the host got here, the spin ended before the call
            # was fully enqueued (a call that blocks the host, e.g. a synchronising copy): host time leaked in.
            late += bool(s.query())
            e.synchronize()
            xs.append(s.elapsed_time(e) * 1000.0)
        if late > samples // 2:
            return Stat(
                None,
                note=f"host not hidden in {late}/{samples} samples: the call blocks the host "
                f"(events {statistics.median(xs):.1f} µs include host time)",
            )
        return _stat(xs, note=f"host not hidden in {late}/{samples} samples" if late else "")

    def events_us(self, fn: Fn, samples: int = 3) -> Stat:
        """Plain events around a synchronised call (for calls too long for `hidden_us`): includes host time."""
        xs = []
        for _ in range(samples):
            self.flush_l2()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            xs.append(s.elapsed_time(e) * 1000.0)
        return _stat(xs, note="events around a synchronised call: host time included")

    def graph_us(self, fns: list[Fn], replays: int = 20) -> Stat:
        """Per-call µs inside one CUDA graph holding one call per input set in `fns`."""
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    for f in fns:
                        f()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for f in fns:
                    f()
            graph.replay()
            torch.cuda.synchronize()
            xs = []
            for _ in range(5):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(replays):
                    graph.replay()
                e.record()
                e.synchronize()
                xs.append(s.elapsed_time(e) * 1000.0 / (replays * len(fns)))
            del graph
            return _stat(xs, note=f"{len(fns)} input sets")
        except Exception as exc:  # a binding that cannot be captured is a finding, not a crash
            torch.cuda.synchronize()
            return Stat(None, note=f"graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")

    def loop_us(self, fn: Fn, n: int = 200, budget_s: float = 1.0) -> Stat:
        """Wall µs per call over back-to-back calls from Python (no sync between calls)."""
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        one = time.perf_counter() - t0
        n = max(3, min(n, int(budget_s / max(one, 1e-6))))
        xs = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            xs.append((time.perf_counter() - t0) * 1e6 / n)
        return _stat(xs, note=f"{n} calls")


def host_yardstick(timer: Timer) -> float | None:
    """Python µs per call of one tiny torch op (add, out=): how fast this host dispatches right now.
    The VM's host speed drifts (docs/perf-reference.md §4.4), so per-call numbers are read against this."""
    a = torch.ones(16, device="cuda")
    b, c = a.clone(), torch.empty_like(a)
    for _ in range(100):
        torch.add(a, b, out=c)
    return timer.loop_us(lambda: torch.add(a, b, out=c), n=2000, budget_s=0.3).median


def _stat(xs: list[float], note: str = "") -> Stat:
    xs = sorted(xs)
    if not xs:
        return Stat(None, note=note or "no samples")
    q = statistics.quantiles(xs, n=10) if len(xs) >= 2 else [xs[0]] * 9
    return Stat(statistics.median(xs), q[0], q[-1], len(xs), note)


def ratio(a: Stat | None, b: Stat | None) -> str:
    if a is None or b is None or a.median is None or b.median is None or b.median == 0:
        return "–"
    return f"{a.median / b.median:.2f}"


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x = x.detach().to(torch.float64)
    if not torch.isfinite(x).all():
        return float("nan")
    return float((x - ref).norm() / ref.norm())


def kernel_name(name: str) -> str:
    """A CUDA kernel's name without `void`, anonymous namespaces, template arguments and parameters: one row per
    kernel, not per instance."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    for cut in ("(", "<"):
        name = name.split(cut)[0]
    return name[:80]


def kernel_totals(prof, per_call: int = 1) -> dict[str, float]:
    """Device µs per kernel (kernel_name) in a torch.profiler trace with CUDA activity, divided by `per_call`,
    the largest first."""
    totals: dict[str, float] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            key = kernel_name(ev.name)
            totals[key] = totals.get(key, 0.0) + ev.device_time / per_call
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def environment() -> dict:
    """What a result depends on: device, driver, torch/CUDA/cuDNN/triton versions, date, commit."""
    props = torch.cuda.get_device_properties(0)
    env = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "driver": _cmd(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "sm_clock_now_mhz": _cmd(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"]),
        "commit": os.environ.get("BENCH_COMMIT") or _cmd(["git", "rev-parse", "--short", "HEAD"]),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    return env


def _cmd(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_outputs(out_dir: Path, name: str, markdown: str, payload: dict) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / f"{name}.md", out_dir / f"{name}.json"
    md.write_text(markdown + "\n")
    js.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    return md, js


def _jsonable(obj: object) -> object:
    if isinstance(obj, Stat):
        return asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)


def load_op(kernel_path: str | None, root: Path) -> tuple[object | None, str]:
    """The built op package through `kernels.get_local_kernel` (the path a user's code takes), or None and why.

    `kernel_path` may be a variant folder or a folder of variants; default: root/build/ggml-attn-kernels
    (`ggml-vendor build` writes build/<package>/<variant>/).
    """
    try:
        import kernels
    except ImportError as exc:
        return None, f"not built: the `kernels` package is not importable ({exc})"
    path = Path(kernel_path) if kernel_path else root / "build" / "ggml-attn-kernels"
    if not path.exists():
        return None, f"not built: {path} does not exist (run `ggml-vendor build`)"
    try:
        module = kernels.get_local_kernel(path.resolve())
    except Exception as exc:  # any failure to load is reported in the table, not raised
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"not built: get_local_kernel({path}) failed: {type(exc).__name__}: {first[:200]}"
    where = Path(getattr(module, "__file__", "") or path).parent
    return module, f"loaded from {where}"


def bench_parser(doc: str, name: str, root: Path) -> argparse.ArgumentParser:
    """The options every op benchmark takes: where to write, which build of the op, the raw-ggml harness."""
    here = root / "benchmarks"
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--out", default=str(here / "out"), help=f"folder for {name}.md/.json (default benchmarks/out)")
    p.add_argument(
        "--kernel",
        default=None,
        help="built op: a variant folder or a folder of variants (default: build/ggml-attn-kernels)",
    )
    p.add_argument("--vendor", default=str(root / "vendor" / "ggml"), help="vendored ggml tree for the raw harness")
    p.add_argument(
        "--build-dir",
        default=str(here / "out" / "raw_ggml_build"),
        help="where the raw-ggml harness is compiled (cached by content)",
    )
    p.add_argument("--samples", type=int, default=30, help="host-hidden samples per measurement")
    return p


def report_tail(reference: str, env: dict) -> list[str]:
    """The closing lines of a benchmark report: the reference numbers, the environment, the command."""
    lines = ["", f"Reference: {reference}.", "", "### Environment", ""]
    lines += [f"* {k}: {v}" for k, v in env.items()]
    return lines + [f"* command: `python3 {' '.join(sys.argv)}`"]


def load_raw_ggml(vendor: Path, build_dir: Path) -> tuple[object | None, str]:
    """ggml's own kernels through the raw harness (benchmarks/raw_ggml), compiled against `vendor`; None and
    the reason when it cannot be built here."""
    try:
        from raw_ggml import loader

        raw = loader.RawGgml(loader.build(vendor, build_dir, quiet=False))
        return raw, f"built {raw.path}"
    except Exception as exc:
        return None, f"unavailable: {exc}".splitlines()[0][:300]
