"""`ggml-vendor build`: the host variant, or the whole matrix (`--all`), in parallel and cached."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from toolkit import help as help_text
from toolkit.app import (
    DryRunOpt,
    JsonOpt,
    Locked,
    NoWaitOpt,
    PackageOpt,
    ProjectOpt,
    VariantOpt,
    VerboseOpt,
    app,
    for_each_package,
    run_guarded,
)
from toolkit.core import ui


def _build(
    cfg,  # type: ignore[no-untyped-def]
    all_variants: bool,
    patterns: list[str],
    jobs: int | None,
    dry_run: bool,
    as_json: bool,
    create_envs: bool,
    verbose: bool,
    engine: str = "auto",
    toolchain: str = "auto",
    provision: bool | None = None,
) -> None:
    from toolkit import build as build_stage  # deferred: keeps CLI start-up light

    request = build_stage.Request(
        all_variants,
        tuple(patterns),
        create_envs=create_envs,
        engine=engine,
        toolchain=toolchain,
        provision=provision,  # None: the stage's policy (on with --all / --create-envs)
        jobs=jobs,
        progress=not as_json,
    )
    say = (lambda m: None) if as_json else (lambda m: ui.err.print(f"[dim]…[/] {escape(m)}", markup=True))
    with ui.task("planning the build", verbose=verbose, quiet=as_json) as task:
        planned = build_stage.plan(cfg, request, task.log)
    for note in planned.notes:
        ui.err.print(f"[yellow]note:[/] {escape(note)}", markup=True)
    if dry_run:
        if as_json:
            ui.emit_json({"dry_run": True, **planned.to_json()})
        else:
            _print(planned.lines())
        return
    if verbose and not as_json:
        _print(planned.lines())
    report = build_stage.execute(planned, say)
    if as_json:
        ui.emit_json(report.to_json())
    else:
        _print(report.lines())
    for line in report.problems():
        ui.err.print(line)
    if not report.ok:
        raise report.error()


def _print(lines: list[str]) -> None:
    for line in lines:
        ui.out.print(line)  # literal text: reasons name [tables] and paths, never markup


@app.command("build", help=help_text.BUILD)
def build(
    project: ProjectOpt = None,
    package: PackageOpt = [],  # noqa: B006
    all_variants: Annotated[bool, typer.Option("--all", help="Every variant of the matrix (variants/*.toml).")] = False,
    variant: VariantOpt = [],  # noqa: B006
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", min=1, help="Parallel compiler invocations (default: CPU count).")
    ] = None,
    create_envs: Annotated[
        bool,
        typer.Option(
            "--create-envs",
            help=(
                "Create missing per-torch-version environments: from the matrix's [sources] (implies "
                "--provision), then for other rows a venv with torch from the matrix's [torch-index] URL."
            ),
        ),
    ] = False,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help=(
                "Who builds: local (this host's toolchains), nix (kernel-builder via Nix >= 2.18 with "
                "nix-command and flakes enabled; every variant of this host's system), auto (default: local)."
            ),
        ),
    ] = "auto",
    toolchain: Annotated[
        str,
        typer.Option(
            "--toolchain",
            help=(
                "Host C++ compiler/linker for Linux variants (and nvcc's -ccbin): zig (the pinned ziglang "
                "0.14.1 targeting glibc 2.28: manylinux_2_28-clean on any host; provisioned when missing), "
                "system (CXX or g++), auto (default: zig when installed or provisioning, else system)."
            ),
        ),
    ] = "auto",
    provision: Annotated[
        bool | None,
        typer.Option(
            "--provision/--no-provision",
            help=(
                "Install what selected variants lack and the matrix's [sources] provide — a torch build per "
                "torch version, a CUDA toolkit per version (PyPI cuda-toolkit), the pinned zig — into the user "
                "cache (atomically; reused by later runs). Default: on with --all."
            ),
        ),
    ] = None,
    dry_run: DryRunOpt = False,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    run_guarded(
        for_each_package,
        project,
        package,
        lambda cfg: _build(
            cfg, all_variants, variant, jobs, dry_run, json_, create_envs, verbose, engine, toolchain, provision
        ),
        as_json=json_,
        verbose=verbose,
        lock=Locked(project, "build", no_wait, shared=dry_run),
    )
