"""The benchmarks' one entry point.

    python -m benchmarks list
    python -m benchmarks run SUITE... [--out DIR] [--budget-s S] [--record] [--python PY]
    python -m benchmarks report [--check]

`run` runs each named suite's measurement script (benchmarks/suites.py) in a fresh process, in the order given,
and starts none that no longer fits the time budget (reported as skipped for time). Each suite prints the
common table (configuration, device time, per-call time with the host, best peer and ratio, the record and
the regression flag) and writes OUT/<suite>.json in the common schema (benchmarks/record.py), beside the
script's own output under OUT/raw/<suite>/. `--record` appends the run to benchmarks/results/<suite>.json, the
committed record later runs are judged against. `report` writes docs/benchmarks.md from the committed
results (`--check`: exit 1 when the committed page differs from what they generate).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the measurement scripts import each other as top-level modules

import record  # noqa: E402
import report  # noqa: E402
import suites  # noqa: E402

RESULTS = HERE / "results"


def run_suite(suite: suites.Suite, out: Path, python: str, timeout_s: float, keep: bool) -> int:
    """One suite: its script, then its rows judged against the committed record; 0, or the script's exit code."""
    raw = out / "raw" / suite.name
    raw.mkdir(parents=True, exist_ok=True)
    argv = suites.command(suite, python, HERE, raw)
    print(f"[benchmarks] {suite.name}: {' '.join(argv[1:])} (limit {int(timeout_s)} s)", flush=True)
    with open(raw / "log.txt", "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, cwd=HERE.parent)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = 124
    produced = raw / suite.output
    if not produced.is_file():
        print(f"[benchmarks] {suite.name}: exit code {rc}, no {suite.output} written (see {raw / 'log.txt'})")
        return rc or 1
    env, rows = suite.adapter(json.loads(produced.read_text(encoding="utf-8")))
    run = record.Run(suite.name, env, rows)
    history = record.load_runs(RESULTS / f"{suite.name}.json")
    judged = record.judge_run(run, history)
    print(f"\n## {suite.name}: {suite.what}\n\n{record.env_line(env)}\n")
    print("\n".join(record.table_lines(judged)))
    print("\n".join(["", *record.regression_lines(judged)]) if any(j.regression for j in judged) else "")
    (out / f"{suite.name}.json").write_text(json.dumps(run.to_json(), indent=1, ensure_ascii=False) + "\n")
    if keep:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{suite.name}.json").write_text(record.dump_runs([*history, run]), encoding="utf-8")
        print(f"[benchmarks] {suite.name}: recorded in {RESULTS / (suite.name + '.json')}")
    return rc


def cmd_run(args: argparse.Namespace) -> int:
    unknown = [n for n in args.suites if n not in suites.SUITES]
    if unknown:
        print(f"error: unknown suite {unknown[0]!r}; choose from {', '.join(suites.SUITES)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start, status, skipped = time.monotonic(), 0, []
    for name in args.suites:
        suite = suites.SUITES[name]
        left = args.budget_s - (time.monotonic() - start)
        if suite.estimate_s > left:
            print(
                f"[benchmarks] {name}: skipped for time ({int(left)} s left, the suite takes about {suite.estimate_s})"
            )
            skipped.append(name)
            continue
        status = run_suite(suite, out, args.python, left, args.record) or status
    summary = {"skipped_for_time": skipped, "exit_code": status}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return status


def cmd_report(args: argparse.Namespace) -> int:
    text = report.render(RESULTS)
    page = HERE.parent / "docs" / "benchmarks.md"
    if args.check:
        if not page.is_file() or page.read_text(encoding="utf-8") != text:
            print(f"error: {page.name} differs from benchmarks/results/; run `python -m benchmarks report`")
            return 1
        return 0
    page.write_text(text, encoding="utf-8")
    print(f"wrote {page}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the suites and what each measures")
    r = sub.add_parser("run", help="run suites, print their tables, write their JSON")
    r.add_argument("suites", nargs="+", metavar="SUITE", help=", ".join(suites.SUITES))
    r.add_argument("--out", default=str(HERE / "out"), help="results folder (default benchmarks/out)")
    r.add_argument("--budget-s", type=float, default=3600.0, help="start no suite that no longer fits (seconds)")
    r.add_argument("--record", action="store_true", help="append the runs to benchmarks/results/ (the record)")
    r.add_argument("--python", default=sys.executable, help="the interpreter that runs the scripts")
    rep = sub.add_parser("report", help="write docs/benchmarks.md from benchmarks/results/")
    rep.add_argument("--check", action="store_true", help="exit 1 when docs/benchmarks.md is not up to date")
    args = p.parse_args(argv)
    if args.cmd == "list":
        for s in suites.SUITES.values():
            print(f"{s.name:10} ~{s.estimate_s:4d} s  {s.what}")
        return 0
    return cmd_run(args) if args.cmd == "run" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
