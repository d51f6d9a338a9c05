"""`ggml-vendor verify [VARIANT...]`: check each build/<variant>/ before it can be published."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from toolkit.app import JsonOpt, Locked, NoWaitOpt, ProjectOpt, app, run_guarded
from toolkit.core import config, ui
from toolkit.core.errors import VerifyError

_STYLE = {"pass": "green", "fail": "red", "warn": "yellow", "skip": "dim"}


def render_table(report) -> Table:  # type: ignore[no-untyped-def]
    from toolkit.verify.runner import summary_rows

    table = Table(title="verify", show_lines=False)
    for col in ("variant", "check", "status", "finding"):
        table.add_column(col, overflow="fold")
    for variant, check, status, message in summary_rows(report):
        table.add_row(variant, check, f"[{_STYLE.get(status, '')}]{status}[/]", message)
    return table


@app.command("verify")
def verify(
    variants: Annotated[list[str] | None, typer.Argument(help="Variant names under build/ (default: all).")] = None,
    project: ProjectOpt = None,
    json_out: JsonOpt = False,
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
    no_wait: NoWaitOpt = False,
) -> None:
    """Check every build/<variant>/: layout and names (op namespace = .so stem = metadata id), metadata.json
    through kernels' own parser and digest, backend.archs against the cubins/PTX inside the binary, ABI
    (manylinux_2_28, abi3 >= 3.9, macOS minos), real binaries (no Git LFS stubs), the Metal library,
    provenance against vendor/UPSTREAM, a clean vendor/, an import through kernels.get_local_kernel
    when this machine can load the variant, and (with a GPU) conformance: every op against the package's
    float64 reference of the documented contract on a fixed set of shapes. Exits 8 when anything fails; publish requires a pass."""

    def body() -> None:
        from toolkit.verify import VerifyOptions, verify_build

        cfg = config.load(project)
        with ui.task("verifying build/ variants", quiet=json_out):
            report = verify_build(
                cfg,
                variants or None,
                options=VerifyOptions(
                    smoke=not no_smoke, host_toolchain_ok=host_toolchain, conformance=not no_conformance
                ),
            )
        if json_out:
            ui.emit_json(report.to_json())
        else:
            ui.out.print(render_table(report))
        if not report.ok:
            failures = report.failures()
            first = failures[0] if failures else None
            raise VerifyError(
                f"{len(failures)} check(s) failed"
                + (f"; first: {first.variant}: {first.check}: {first.message}" if first else ""),
                first.remedy if first and first.remedy else "fix the findings above and re-run ggml-vendor verify",
            )
        if not json_out:
            ui.note("verified", f"{len(report.variants)} variant(s); publish may ship them")

    run_guarded(body, lock=Locked(project, "verify", no_wait))
