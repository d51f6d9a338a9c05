"""`ggml-vendor build`: the host variant, or the whole matrix (`--all`), in parallel and cached."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

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
from toolkit.core.errors import BuildError

if TYPE_CHECKING:
    from toolkit.build.stage import BuildReport, Prepared

_STYLE = {
    "built": "green",
    "up-to-date": "green",
    "skipped": "yellow",
    "failed": "red",
    "interrupted": "red",
    "planned": "cyan",
}


def _print_plan(prep: Prepared) -> None:
    plan = prep.plan
    proj = plan.project
    ui.out.print(
        f"[bold]build plan[/] for {escape(proj.name)} (op id uid {proj.uid}, from build.toml + "
        f"{len(proj.python_files)} python files + vendor/)",
        markup=True,
    )
    tc = prep.toolchain
    if tc is not None:
        ui.out.print(f"host toolchain: {tc.kind} ({tc.cxx_id})")
    shown: set[str] = set()
    for v in plan.variants:
        head = f"[bold]{v.name}[/] -> {v.out_dir}/{v.so_name}"
        if not v.status.buildable:
            tag = "[cyan]provisionable:[/]" if v.status.provision else "[yellow]skipped:[/]"
            ui.out.print(f"{head}\n  {tag} {escape(v.status.reason)}", markup=True)
            if (
                v.status.reason.startswith("needs torch")
                and prep.matrix is not None
                and prep.matrix.has_index(v.variant)
            ):
                from toolkit.build.envs import plan_env

                env = plan_env(v.variant.torch, v.variant.compute, prep.matrix.index_for(v.variant))
                cmds = " && ".join(" ".join(c) for c in env.commands)
                ui.out.print(f"  [dim]--create-envs would run: {escape(cmds)}[/]", markup=True)
            if not v.steps:
                continue
            ui.out.print("  would run (toolchain not on this host):")
        else:
            how = v.status.executor or ""
            if v.status.env:
                how += f", torch {v.status.env.version} ({v.status.env.python or v.status.env.torch_dir})"
            if v.status.toolkit:
                how += f", {v.status.toolkit.backend} {v.status.toolkit.full_version} ({v.status.toolkit.compiler})"
            ui.out.print(f"{head}\n  [green]build[/] with {escape(how)}; archs {list(v.archs)}", markup=True)
        for sid in v.steps:
            s = plan.steps[sid]
            if sid in shown:
                ui.out.print(f"    = {escape(s.label)} [dim](shared, see {sid})[/]", markup=True)
                continue
            shown.add(sid)
            ui.out.print(f"    {sid}: {escape(s.label)}")
            ui.out.print(f"      [dim]{escape(' '.join(s.argv))}[/]", markup=True)
        for note in v.notes:
            ui.out.print(f"  note: {escape(note)}")
    buildable = plan.buildable()
    steps = plan.steps_for(buildable)
    ui.out.print(
        f"{len(buildable)} variant(s) to build here with {len(steps)} distinct step(s) "
        f"(before cache hits); {len(plan.variants) - len(buildable)} skipped."
    )


def _print_report(report: BuildReport) -> None:
    table = Table(title="ggml-vendor build")
    table.add_column("variant", no_wrap=True)
    table.add_column("result")
    table.add_column("time", justify="right")
    table.add_column("compiled / cached", justify="right")
    table.add_column("detail")
    for r in report.results:
        style = _STYLE.get(r.result, "white")
        detail = r.reason if r.result != "built" and r.result != "up-to-date" else f"{r.out_dir} ({r.id})"
        if r.engine:
            detail += f" -> built by {r.engine}"
        counts = f"{r.compiles} / {r.hits}" if r.result not in ("skipped",) else ""
        time_s = f"{r.seconds:.1f}s" if r.result not in ("skipped",) else ""
        table.add_row(r.name, f"[{style}]{r.result}[/]", time_s, counts, escape(detail))
    ui.out.print(table, markup=True)  # cells carry styles; dynamic text in them is escaped
    s = report.stats
    ui.out.print(f"{s.compiler_invocations} compiler invocation(s), {s.cache_hits} cache hit(s), {s.seconds:.2f}s")
    for r in report.failed:
        step = r.failed_step or r.reason or "build"
        if r.tail:
            ui.err.print(
                f"[red]{r.name}[/]: {escape(step)} failed; last lines (full log: {escape(r.log)}):", markup=True
            )
            ui.err.print(r.tail, markup=False)
        else:
            ui.err.print(f"[red]{r.name}[/]: {escape(step)} failed (full log: {escape(r.log or 'none')})", markup=True)


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
    from toolkit.build.stage import NothingToBuildError

    if provision is None:  # `build --all` (and --create-envs) provision what rows lack; --no-provision opts out
        provision = all_variants or create_envs
    request = build_stage.Request(
        all_variants,
        tuple(patterns),
        create_envs=create_envs,
        engine=engine,
        toolchain=toolchain,
        provision=provision,
        dry_run=dry_run,
    )
    say = (lambda m: None) if as_json else (lambda m: ui.err.print(f"[dim]…[/] {escape(m)}", markup=True))
    with ui.task("planning the build", verbose=verbose, quiet=as_json):
        prep = build_stage.plan(cfg, request, say=say)
    for note in prep.notes:
        ui.err.print(f"[yellow]note:[/] {escape(note)}", markup=True)
    if dry_run:
        if as_json:
            ui.emit_json({"dry_run": True, **prep.plan.to_json()})
        else:
            _print_plan(prep)
        return
    buildable = [v for v in prep.plan.variants if v.status.buildable]
    if not buildable:
        reasons = "; ".join(f"{v.name}: {v.status.reason}" for v in prep.plan.variants[:3])
        raise NothingToBuildError(
            f"nothing to build on this host ({reasons})",
            "see `ggml-vendor variants`, or build where the toolchain exists",
        )
    if verbose and not as_json:
        _print_plan(prep)
    report = build_stage.execute(prep, jobs=jobs, progress=not as_json)
    if as_json:
        ui.emit_json(report.to_json())
    else:
        _print_report(report)
    if report.failed:
        names = ", ".join(r.name for r in report.failed)
        raise BuildError(
            f"{len(report.failed)} variant(s) failed: {names}",
            f"see the log(s) under {prep.cache / 'logs'}; build/ keeps their previous state",
        )


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
