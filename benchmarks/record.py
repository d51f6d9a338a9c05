"""The one result schema every suite writes, its table, and the regression rule; pure Python (no torch), so the
logic is tested on a machine without a GPU (tests/benchmarks/).

A suite's run is a `Run`: the configuration it ran in (`env`: GPU, date, torch, CUDA, compile backend, commit,
source) and its `Row`s. A row names its configuration (op, implementation, dtype, shapes) and carries two times:
device µs (CUDA events with the host hidden, benchmarks/timing.py) and per-call µs with the host (back-to-back
calls from Python: what an eager loop sees), with the best peer of the same configuration beside it. A row more
than 10% slower than the record (the newest committed run of the same suite on the same GPU, by device or by
per-call time) is printed as a REGRESSION. Results converted from earlier reports, whose columns predate this
schema, are kept as `Table`s with their source run named.

Nothing here is ever asserted on time: the rows are printed and written, the regression flag is printed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

SCHEMA = 1
REGRESSION = 1.10  # a row more than 10% slower than its record
SUITES = ("decode", "prefill", "attention", "gguf", "e2e", "build")
COLUMNS = (
    "configuration",
    "device",
    "per call (with host)",
    "best peer",
    "÷ peer (device)",
    "÷ peer (per call)",
    "record (device / per call)",
    "regression",
)


@dataclass
class Row:
    """One configuration's times in µs (None: not measured, `note` says why)."""

    config: dict[str, str | int | float]
    device_us: float | None = None
    per_call_us: float | None = None
    peer: str | None = None
    peer_device_us: float | None = None
    peer_per_call_us: float | None = None
    note: str = ""

    def key(self) -> str:
        """The configuration as a stable string: what a later run's row is matched with."""
        return ", ".join(f"{k}={v}" for k, v in self.config.items())


@dataclass
class Table:
    """Results kept as they were reported before this schema: the columns as measured, the source run named."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Run:
    """One suite's run: where it ran (`env`) and what it measured."""

    suite: str
    env: dict[str, str | int | float | None]
    rows: list[Row] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, **asdict(self)}

    @classmethod
    def from_json(cls, doc: dict) -> Run:
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"result schema {doc.get('schema')!r} is not {SCHEMA}: re-run the suite to rewrite it")
        return cls(
            suite=doc["suite"],
            env=dict(doc.get("env", {})),
            rows=[Row(**r) for r in doc.get("rows", [])],
            tables=[Table(**t) for t in doc.get("tables", [])],
        )


@dataclass
class Judged:
    """A row beside its record: the record's times and whether the row is a regression."""

    row: Row
    record: Row | None
    regression: list[str]


def slower(now: float | None, then: float | None) -> float | None:
    """now ÷ then, or None when either is missing."""
    if not now or not then:
        return None
    return now / then


def judge(row: Row, record: Row | None, limit: float = REGRESSION) -> Judged:
    """Which of the row's two times is more than `limit` times its record's (device, per call)."""
    flags = []
    if record is not None:
        for what, now, then in (
            ("device", row.device_us, record.device_us),
            ("per call", row.per_call_us, record.per_call_us),
        ):
            q = slower(now, then)
            if q is not None and q > limit:
                flags.append(f"{what} {q:.2f}×")
    return Judged(row, record, flags)


def record_rows(runs: list[Run], suite: str, gpu: str | None) -> dict[str, Row]:
    """The record of a suite on one GPU: per configuration, its row in the newest run that measured it (runs are
    kept oldest first). Times are only compared on the same kind of card."""
    found: dict[str, Row] = {}
    for run in runs:
        if run.suite != suite or run.env.get("gpu") != gpu:
            continue
        for row in run.rows:
            if row.device_us is not None or row.per_call_us is not None:
                found[row.key()] = row
    return found


def judge_run(run: Run, history: list[Run]) -> list[Judged]:
    record = record_rows(history, run.suite, run.env.get("gpu"))  # type: ignore[arg-type]
    return [judge(row, record.get(row.key())) for row in run.rows]


def fmt_us(us: float | None) -> str:
    """µs below a millisecond, ms below a second, s above: one column reads across suites."""
    if us is None:
        return "–"
    if us < 1000:
        return f"{us:.1f} µs"
    if us < 1e6:
        return f"{us / 1000:.2f} ms"
    return f"{us / 1e6:.2f} s"


def fmt_ratio(q: float | None) -> str:
    return "–" if q is None else f"{q:.2f}"


def table_lines(judged: list[Judged]) -> list[str]:
    """The same markdown table for every suite (COLUMNS)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for j in judged:
        r, rec = j.row, j.record
        config = r.key() + (f" ({r.note})" if r.note else "")
        record = f"{fmt_us(rec.device_us)} / {fmt_us(rec.per_call_us)}" if rec else "–"
        cells = [
            config,
            fmt_us(r.device_us),
            fmt_us(r.per_call_us),
            f"{r.peer} ({fmt_us(r.peer_device_us)} / {fmt_us(r.peer_per_call_us)})" if r.peer else "–",
            fmt_ratio(slower(r.device_us, r.peer_device_us)),
            fmt_ratio(slower(r.per_call_us, r.peer_per_call_us)),
            record,
            "**REGRESSION** " + ", ".join(j.regression) if j.regression else "",
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def legacy_lines(table: Table) -> list[str]:
    lines = [f"#### {table.title}", ""] if table.title else []
    if table.caption:
        lines += [table.caption, ""]
    lines += ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return lines


def env_line(env: dict) -> str:
    """The configuration a run was measured in, one line (GPU, date, software, compile backend, source)."""
    keys = ("gpu", "date", "torch", "cuda", "transformers", "fla", "compile_backend", "commit", "source")
    return "; ".join(f"{k.replace('_', ' ')}: {env[k]}" for k in keys if env.get(k) not in (None, ""))


def load_runs(path: Path) -> list[Run]:
    """The runs of one committed results file (benchmarks/results/<suite>.json), oldest first."""
    if not path.is_file():
        return []
    doc = json.loads(path.read_text(encoding="utf-8"))
    return [Run.from_json(r) for r in doc.get("runs", [])]


def dump_runs(runs: list[Run]) -> str:
    """The results file's text: stable key order and indentation, so the committed file diffs run by run."""
    return json.dumps({"runs": [r.to_json() for r in runs]}, indent=1, ensure_ascii=False) + "\n"


def regression_lines(judged: list[Judged]) -> list[str]:
    return [
        f"REGRESSION {j.row.key()}: " + ", ".join(j.regression) + " the record's time" for j in judged if j.regression
    ]
