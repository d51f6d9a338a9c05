"""`ggml-vendor verify [VARIANT...]`: check each build/<variant>/ before it can be published."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from toolkit import help as help_text
from toolkit.app import Options, Run, command
from toolkit.core import ui
from toolkit.core.errors import VerifyError
from toolkit.core.stage import Verdict

if TYPE_CHECKING:
    from toolkit import verify as verify_stage

_STYLE = {"pass": "green", "fail": "red", "warn": "yellow", "skip": "dim"}


def render_table(report: Any) -> Table:
    from toolkit.verify.runner import summary_rows

    table = Table(title="verify", show_lines=False)
    for col in ("variant", "check", "status", "finding"):
        table.add_column(col, overflow="fold")
    for variant, check, status, message in summary_rows(report):
        table.add_row(variant, check, Text(status, style=_STYLE.get(status, "")), Text(message))
    return table


@dataclass(frozen=True)
class Planned:
    """verify's plan as --dry-run prints it: the variant directories it would check."""

    plan: Any

    def lines(self) -> list[str]:
        return list(self.plan.lines())

    def to_json(self) -> dict[str, Any]:
        return {"variants": [str(p) for p in self.plan.paths]}


@dataclass(frozen=True)
class Verified(Verdict):
    """verify's report in the protocol's terms: exit 8 when any check failed."""

    report: Any

    def failure(self) -> VerifyError | None:
        if self.report.ok:
            return None
        failures = self.report.failures()
        first = failures[0] if failures else None
        return VerifyError(
            f"{len(failures)} check(s) failed"
            + (f"; first: {first.variant}: {first.check}: {first.message}" if first else ""),
            first.remedy if first and first.remedy else "fix the findings above and re-run ggml-vendor verify",
        )

    def to_json(self) -> dict[str, Any]:
        return dict(self.report.to_json())


def _show(result: Any, opts: Options) -> None:
    if isinstance(result, Planned):
        for line in result.lines():
            ui.out.print(line)
        return
    ui.out.print(render_table(result.report))
    if result.ok:
        ui.note("verified", f"{len(result.report.variants)} variant(s); publish may ship them")


@command("verify", help=help_text.VERIFY, packages=True)
def verify(
    opts: Options,
    variants: Annotated[list[str] | None, typer.Argument(help="Variant names under build/ (default: all).")] = None,
    no_smoke: Annotated[bool, typer.Option("--no-smoke", help="Skip the get_local_kernel import test.")] = False,
    host_toolchain: Annotated[
        bool,
        typer.Option(
            "--host-toolchain",
            help="Accept binaries above the manylinux_2_28 symbol ceilings (built with this "
            "machine's compiler) as a warning; such variants can be published to a "
            "private hub or git remote, never to huggingface.co.",
        ),
    ] = False,
    no_conformance: Annotated[
        bool,
        typer.Option(
            "--no-conformance",
            help="Skip running the ops against the float64 contract on this host's GPU (publish then refuses "
            "variants this host could have checked).",
        ),
    ] = False,
) -> Run[verify_stage.Plan, Planned | Verified]:
    from toolkit import verify as verify_stage

    options = verify_stage.VerifyOptions(
        smoke=not no_smoke, host_toolchain_ok=host_toolchain, conformance=not no_conformance
    )
    request = verify_stage.Request(tuple(variants or ()), options)
    return Run(
        lambda cfg: f"verifying {cfg.build_dir.relative_to(cfg.root).as_posix()}/ variants of {cfg.name}",
        plan=lambda cfg, log: verify_stage.plan(cfg, request, log),
        execute=lambda plan, log: Verified(verify_stage.execute(plan, log)),
        preview=Planned,
        show=_show,
        interrupted=verify_stage.interrupted,
    )
