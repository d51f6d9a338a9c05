"""What the build stage prints: the plan (--dry-run, --verbose) and the report, as plain lines that a pipe or
an 80-column terminal shows whole: the tables hold short cells only, every reason is printed below them."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.build.results import RunStats, VariantResult
from toolkit.core.errors import BuildError
from toolkit.core.records import fields_json

if TYPE_CHECKING:
    from toolkit.build.stage import BuildPlanned
    from toolkit.build.steps import BuildPlan, VariantPlan

WIDTH = 78  # reasons wrap here: readable in an 80-column terminal and in a log


def wrapped(head: str, text: str, indent: str = "    ") -> list[str]:
    return textwrap.wrap(f"{head}{text}", WIDTH, subsequent_indent=indent, break_on_hyphens=False) or [head]


def table_lines(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


# --- the plan ---------------------------------------------------------------------------------------------


def _how(v: VariantPlan) -> str:
    how = v.status.executor or ""
    if v.status.env:
        how += f", torch {v.status.env.version} ({v.status.env.python or v.status.env.torch_dir})"
    if v.status.toolkit:
        tk = v.status.toolkit
        how += f", {tk.backend} {tk.full_version or tk.version} ({tk.compiler})"
    return how


def _variant_lines(v: VariantPlan, plan: BuildPlan, shown: dict[str, str]) -> list[str]:
    lines = [f"{v.name} -> {v.out_dir}/{v.so_name}"]
    if v.status.buildable:
        lines += wrapped("  build with ", f"{_how(v)}; archs {list(v.archs)}")
    else:
        tag = "provisionable: " if v.status.provision else "skipped: "
        lines += wrapped(f"  {tag}", v.status.reason)
        if v.steps:
            lines.append("  would run (toolchain not on this host yet):")
    for sid in v.steps:
        s = plan.steps[sid]
        if sid in shown:  # the same command line (same toolchain, flags and target): compiled once
            lines.append(f"    = {s.label} (shared with {shown[sid]}, step {sid})")
            continue
        shown[sid] = v.name
        lines.append(f"    {sid}: {s.label}")
        lines.append(f"      {' '.join(s.argv)}")
    lines += [ln for note in v.notes for ln in wrapped("  note: ", note)]
    return lines


def plan_lines(planned: BuildPlanned) -> list[str]:
    plan = planned.plan
    proj = plan.project
    lines = [
        f"build plan for {proj.name} (op id uid {proj.uid}, from build.toml + {len(proj.python_files)} "
        "python files + vendor/)"
    ]
    if planned.toolchain is not None:
        lines.append(f"host toolchain: {planned.toolchain.kind} ({planned.toolchain.cxx_id})")
    if planned.installs:
        lines.append("provisioning, first (into the user cache, atomically; reused by later runs):")
        lines += [ln for i in planned.installs for ln in wrapped("  install ", f"{i.words} -> {i.path}")]
    if planned.envs:
        lines.append("torch environments to create (--create-envs), then checked to hold the row's build:")
        for env in planned.envs:
            lines += wrapped(f"  {env.path.name}: ", " && ".join(" ".join(c) for c in env.commands))
    shown: dict[str, str] = {}
    for v in plan.variants:
        lines += _variant_lines(v, plan, shown)
    lines.append(_plan_summary(planned))
    return lines


def _plan_summary(planned: BuildPlanned) -> str:
    plan = planned.plan
    buildable = plan.buildable()
    later = [v for v in plan.variants if v.status.provision] if planned.installs else []
    skipped = len(plan.variants) - len(buildable) - len(later)
    after = f", {len(later)} more after provisioning" if later else ""
    steps = len(plan.steps_for(buildable))
    return f"{len(buildable)} variant(s) to build here with {steps} distinct step(s) (before cache hits){after}; {skipped} skipped."


# --- the report -------------------------------------------------------------------------------------------


@dataclass
class BuildReport:
    """What the build did, on the stage protocol's Report interface."""

    results: list[VariantResult]
    stats: RunStats = field(default_factory=RunStats)
    plan: BuildPlan | None = None
    log_dir: str = ""

    @property
    def failed(self) -> list[VariantResult]:
        return [r for r in self.results if r.result in ("failed", "interrupted")]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else BuildError.exit_code

    def error(self) -> BuildError:
        names = ", ".join(r.name for r in self.failed)
        return BuildError(
            f"{len(self.failed)} variant(s) failed: {names}",
            f"see the log(s) under {self.log_dir or 'the build cache'}; build/ keeps their previous state",
        )

    def lines(self) -> list[str]:
        """The summary table (short cells), then every reason below it, then the totals. A step shared by
        several variants is counted once, for the first variant that used it."""
        rows = [("variant", "result", "time", "compiled / cached")]
        for r in self.results:
            ran = r.result not in ("skipped",)
            rows.append(
                (r.name, r.result, f"{r.seconds:.1f}s" if ran else "", f"{r.compiles} / {r.hits}" if ran else "")
            )
        lines = ["ggml-vendor build", *table_lines(rows)]
        details = [r for r in self.results if r.result not in ("built", "up-to-date")]
        if details:
            lines.append("why:")
            for r in details:
                reason = r.reason + (f" -> built by {r.engine}" if r.engine else "")
                lines += wrapped(f"  {r.name}: ", reason or r.result)
        s = self.stats
        lines.append(f"{s.compiler_invocations} compiler invocation(s), {s.cache_hits} cache hit(s), {s.seconds:.2f}s")
        return lines

    def problems(self) -> list[str]:
        """For stderr: each failed variant's failing step and the tail of its output."""
        out: list[str] = []
        for r in self.failed:
            step = r.failed_step or r.reason or "build"
            if r.tail:
                out += [f"{r.name}: {step} failed; last lines (full log: {r.log}):", r.tail]
            else:
                out.append(f"{r.name}: {step} failed (full log: {r.log or 'none'})")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "variants": [r.to_json() for r in self.results],
            **fields_json(
                self.stats, "compiler_invocations cache_hits per_tool seconds", seconds=lambda t: round(t, 3)
            ),
            "ok": self.ok,
        }
