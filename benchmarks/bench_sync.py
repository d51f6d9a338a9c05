"""Benchmark `ggml-vendor sync` against `git clone` + copying the same files, side by side.

    python3 benchmarks/bench_sync.py [CLONE] [--rev REV] [--repeat N] [--json OUT]

CLONE is a local ggml or llama.cpp clone (default: $GGML_VENDOR_REAL_UPSTREAM). Measured, each as the
median of N runs on fresh temporary projects:
  * sync, first       the sync stage's plan + execute in-process into an empty vendor/ (what the library costs)
  * sync, no-op       the same revision again (must write 0 files: bytes, mtimes and inodes compared)
  * CLI first / no-op the `ggml-vendor sync` command in a subprocess (adds Python start-up and imports)
  * baseline          `git clone <CLONE>` (local, full checkout) + copying the same files into vendor/ggml;
                      a script like that redoes both every time, so its "re-sync" costs the same and writes
                      every file again
Targets (issue 2) are printed next to the numbers, never asserted: first sync from a local clone < 2 s,
no-op re-sync < 0.5 s with 0 files written.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from toolkit import sync  # noqa: E402
from toolkit.core import config  # noqa: E402
from toolkit.core.lock import read_lock  # noqa: E402
from toolkit.sync.project_plan import SyncRequest  # noqa: E402

TARGET_FIRST_S = 2.0
TARGET_NOOP_S = 0.5


def make_project(root: Path, upstream: Path) -> config.Config:
    root.mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    (root / "vendor" / "patches").mkdir(parents=True)
    config.set_value(root, "upstream", str(upstream))
    return config.load(root)


def snapshot(vendor: Path) -> dict[str, tuple[int, int, int]]:
    """path -> (inode, mtime_ns, size): identical snapshots mean nothing was written."""
    out = {}
    for p in vendor.rglob("*"):
        if p.is_file():
            st = p.stat()
            out[p.relative_to(vendor).as_posix()] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


def written_between(a: dict, b: dict) -> int:
    return sum(1 for k in set(a) | set(b) if a.get(k) != b.get(k))


def sync_once(cfg: config.Config, rev: str) -> None:
    """What `ggml-vendor sync --rev REV` runs, without the process start-up: plan, then execute."""
    sync.execute(sync.plan(cfg, SyncRequest(rev=rev)))


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench(clone: Path, rev: str, repeat: int) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    os.environ.setdefault("GGML_VENDOR_CACHE", str(tmp / "cache"))
    rows: dict[str, list[float]] = {k: [] for k in ("sync_first", "sync_noop", "cli_first", "cli_noop", "baseline")}
    noop_written: list[int] = []
    files: list[str] = []
    cli = [sys.executable, "-m", "toolkit.cli", "sync", "--rev", rev]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        for i in range(repeat):
            cfg = make_project(tmp / f"lib{i}", clone)
            rows["sync_first"].append(timed(lambda: sync_once(cfg, rev)))
            before = snapshot(cfg.vendor_dir)
            rows["sync_noop"].append(timed(lambda: sync_once(cfg, rev)))
            noop_written.append(written_between(before, snapshot(cfg.vendor_dir)))
            lock = read_lock(cfg.vendor_dir)
            files = sorted(lock.files)
            prefix = "ggml/" if lock.layout == "llama.cpp" else ""

            cli_cfg = make_project(tmp / f"cli{i}", clone)
            rows["cli_first"].append(
                timed(lambda: subprocess.run([*cli, "-C", str(cli_cfg.root)], env=env, check=True, capture_output=True))
            )
            before = snapshot(cli_cfg.vendor_dir)
            rows["cli_noop"].append(
                timed(lambda: subprocess.run([*cli, "-C", str(cli_cfg.root)], env=env, check=True, capture_output=True))
            )
            noop_written.append(written_between(before, snapshot(cli_cfg.vendor_dir)))

            def baseline() -> None:
                work = tmp / f"clone{i}"
                subprocess.run(["git", "-c", "safe.directory=*", "clone", "-q", str(clone), str(work)], check=True)
                dest = tmp / f"base{i}" / "vendor" / "ggml"
                for path in files:
                    src = work / (
                        path
                        if (path in ("LICENSE", "AUTHORS") and not (work / prefix / path).exists())
                        else prefix + path
                    )
                    (dest / path).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dest / path)

            rows["baseline"].append(timed(baseline))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {
        "clone": str(clone),
        "rev": rev,
        "repeat": repeat,
        "files": len(files),
        "median_s": med,
        "all_s": rows,
        "noop_files_written": max(noop_written),
    }


def report(res: dict) -> str:  # type: ignore[type-arg]
    med = res["median_s"]
    base = med["baseline"]
    lines = [
        f"sync benchmark: {res['clone']} @ {res['rev']}, {res['files']} files, median of {res['repeat']}",
        f"{'approach':34} {'seconds':>9} {'vs clone+copy':>14} {'files written':>14}",
    ]
    rows = [
        ("ggml-vendor sync, first (library)", med["sync_first"], res["files"] + 1),
        ("ggml-vendor sync, no-op (library)", med["sync_noop"], res["noop_files_written"]),
        ("ggml-vendor sync, first (CLI)", med["cli_first"], res["files"] + 1),
        ("ggml-vendor sync, no-op (CLI)", med["cli_noop"], res["noop_files_written"]),
        ("git clone + copy (first)", base, res["files"]),
        ("git clone + copy (re-run)", base, res["files"]),
    ]
    for name, s, n in rows:
        lines.append(f"{name:34} {s:9.3f} {s / base:13.3f}x {n:14d}")

    def verdict(seconds: float, target: float, extra_ok: bool = True) -> str:
        return "met" if seconds < target and extra_ok else "MISSED"

    zero = res["noop_files_written"] == 0
    lines += [
        "",
        f"target: first sync from a local clone < {TARGET_FIRST_S} s: "
        f"library {med['sync_first']:.3f} s ({verdict(med['sync_first'], TARGET_FIRST_S)}), "
        f"CLI process {med['cli_first']:.3f} s ({verdict(med['cli_first'], TARGET_FIRST_S)})",
        f"target: no-op re-sync < {TARGET_NOOP_S} s with 0 files written ({res['noop_files_written']} written): "
        f"library {med['sync_noop']:.3f} s ({verdict(med['sync_noop'], TARGET_NOOP_S, zero)}), "
        f"CLI process {med['cli_noop']:.3f} s ({verdict(med['cli_noop'], TARGET_NOOP_S, zero)}; "
        "includes Python start-up and importing every ggml-vendor command)",
        f"speed-up over clone+copy: first {base / med['sync_first']:.1f}x, no-op {base / med['sync_noop']:.1f}x",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clone", nargs="?", default=os.environ.get("GGML_VENDOR_REAL_UPSTREAM"))
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = ap.parse_args()
    if not args.clone:
        ap.error("pass a local ggml/llama.cpp clone or set GGML_VENDOR_REAL_UPSTREAM")
    res = bench(Path(args.clone), args.rev, args.repeat)
    print(report(res))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
