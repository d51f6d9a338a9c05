"""`ggml-vendor build`: the host variant, or the whole matrix (`--all`), in parallel and cached."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from toolkit import help as help_text
from toolkit.app import Options, Run, VariantOpt, command
from toolkit.core import ui
from toolkit.core.config import Config
from toolkit.core.errors import BuildError, NothingToBuildError
from toolkit.core.stage import Log, Verdict

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


@dataclass(frozen=True)
class Planned:
    """build's plan as the CLI prints it (--dry-run, and before the table with --verbose)."""

    prep: Prepared

    def to_json(self) -> dict[str, Any]:
        return self.prep.plan.to_json()


@dataclass(frozen=True)
class Built(Verdict):
    """build's report in the protocol's terms: ok when no variant failed (else exit 7)."""

    prep: Prepared
    report: BuildReport

    def failure(self) -> BuildError | None:
        if not self.report.failed:
            return None
        names = ", ".join(r.name for r in self.report.failed)
        return BuildError(
            f"{len(self.report.failed)} variant(s) failed: {names}",
            f"see the log(s) under {self.prep.cache / 'logs'}; build/ keeps their previous state",
        )

    def to_json(self) -> dict[str, Any]:
        return self.report.to_json()


def _print_unbuildable(prep: Prepared, v: Any) -> None:
    tag = "[cyan]provisionable:[/]" if v.status.provision else "[yellow]skipped:[/]"
    ui.out.print(f"[bold]{escape(v.name)}[/] -> {escape(f'{v.out_dir}/{v.so_name}')}", markup=True)
    ui.out.print(f"  {tag} {escape(v.status.reason)}", markup=True)
    if v.status.reason.startswith("needs torch") and prep.matrix is not None and prep.matrix.has_index(v.variant):
        from toolkit.build.envs import plan_env

        env = plan_env(v.variant.torch, v.variant.compute, prep.matrix.index_for(v.variant))
        cmds = " && ".join(" ".join(c) for c in env.commands)
        ui.out.print(f"  [dim]--create-envs would run: {escape(cmds)}[/]", markup=True)
    if v.steps:
        ui.out.print("  would run (toolchain not on this host):")


def _print_buildable(v: Any) -> None:
    how = v.status.executor or ""
    if v.status.env:
        how += f", torch {v.status.env.version} ({v.status.env.python or v.status.env.torch_dir})"
    if v.status.toolkit:
        how += f", {v.status.toolkit.backend} {v.status.toolkit.full_version} ({v.status.toolkit.compiler})"
    ui.out.print(f"[bold]{escape(v.name)}[/] -> {escape(f'{v.out_dir}/{v.so_name}')}", markup=True)
    ui.out.print(f"  [green]build[/] with {escape(how)}; archs {escape(str(list(v.archs)))}", markup=True)


def _print_steps(plan: Any, v: Any, shown: set[str]) -> None:
    for sid in v.steps:
        s = plan.steps[sid]
        if sid in shown:
            ui.out.print(f"    = {escape(s.label)} [dim](shared, see {escape(sid)})[/]", markup=True)
            continue
        shown.add(sid)
        ui.out.print(f"    {sid}: {s.label}")
        ui.out.print(f"      [dim]{escape(' '.join(s.argv))}[/]", markup=True)


def _print_plan(planned: Planned, _opts: Options | None = None) -> None:
    prep = planned.prep
    plan, proj = prep.plan, prep.plan.project
    ui.out.print(
        f"[bold]build plan[/] for {escape(proj.name)} (op id uid {proj.uid}, from build.toml + "
        f"{len(proj.python_files)} python files + vendor/)",
        markup=True,
    )
    if prep.toolchain is not None:
        ui.out.print(f"host toolchain: {prep.toolchain.kind} ({prep.toolchain.cxx_id})")
    shown: set[str] = set()
    for v in plan.variants:
        if not v.status.buildable:
            _print_unbuildable(prep, v)
            if not v.steps:
                continue
        else:
            _print_buildable(v)
        _print_steps(plan, v, shown)
        for note in v.notes:
            ui.out.print(f"  note: {note}")
    buildable = plan.buildable()
    steps = plan.steps_for(buildable)
    ui.out.print(
        f"{len(buildable)} variant(s) to build here with {len(steps)} distinct step(s) "
        f"(before cache hits); {len(plan.variants) - len(buildable)} skipped."
    )


def _result_row(r: Any) -> tuple[str, ...]:
    style = _STYLE.get(r.result, "white")
    detail = r.reason if r.result not in ("built", "up-to-date") else f"{r.out_dir} ({r.id})"
    if r.engine:
        detail += f" -> built by {r.engine}"
    counts = f"{r.compiles} / {r.hits}" if r.result != "skipped" else ""
    time_s = f"{r.seconds:.1f}s" if r.result != "skipped" else ""
    return (escape(r.name), f"[{style}]{r.result}[/]", time_s, counts, escape(detail))


def _print_failures(report: BuildReport) -> None:
    for r in report.failed:
        step = escape(r.failed_step or r.reason or "build")
        if r.tail:
            ui.err.print(
                f"[red]{escape(r.name)}[/]: {step} failed; last lines (full log: {escape(r.log)}):", markup=True
            )
            ui.err.print(r.tail)
        else:
            ui.err.print(f"[red]{escape(r.name)}[/]: {step} failed (full log: {escape(r.log or 'none')})", markup=True)


def _print_report(built: Built, opts: Options) -> None:
    if opts.verbose:
        _print_plan(Planned(built.prep))
    report = built.report
    table = Table(title="ggml-vendor build")
    table.add_column("variant", no_wrap=True)
    table.add_column("result")
    table.add_column("time", justify="right")
    table.add_column("compiled / cached", justify="right")
    table.add_column("detail")
    for r in report.results:
        table.add_row(*_result_row(r))
    ui.out.print(table, markup=True)  # cells carry styles; dynamic text in them is escaped
    s = report.stats
    ui.out.print(f"{s.compiler_invocations} compiler invocation(s), {s.cache_hits} cache hit(s), {s.seconds:.2f}s")
    _print_failures(report)


def _planner(request: Any) -> Any:
    from toolkit import build as build_stage  # deferred: keeps CLI start-up light

    def plan(cfg: Config, log: Log) -> Prepared:
        prep = build_stage.plan(cfg, request, say=log)
        for note in prep.notes:
            ui.warn("note:", note)
        return prep

    return plan


def _executor(jobs: int | None, as_json: bool) -> Any:
    from toolkit import build as build_stage

    def execute(prep: Prepared, _log: Log) -> Built:
        if not any(v.status.buildable for v in prep.plan.variants):
            reasons = "; ".join(f"{v.name}: {v.status.reason}" for v in prep.plan.variants[:3])
            raise NothingToBuildError(
                f"nothing to build on this host ({reasons})",
                "see `ggml-vendor variants`, or build where the toolchain exists",
            )
        return Built(prep, build_stage.execute(prep, jobs=jobs, progress=not as_json))

    return execute


AllOpt = Annotated[bool, typer.Option("--all", help="Every variant of the matrix (variants/*.toml).")]
JobsOpt = Annotated[
    int | None, typer.Option("--jobs", "-j", min=1, help="Parallel compiler invocations (default: CPU count).")
]
CreateEnvsOpt = Annotated[
    bool,
    typer.Option(
        "--create-envs",
        help=(
            "Create missing per-torch-version environments: from the matrix's [sources] (implies "
            "--provision), then for other rows a venv with torch from the matrix's [torch-index] URL."
        ),
    ),
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help=(
            "Who builds: local (this host's toolchains), nix (kernel-builder via Nix >= 2.18 with "
            "nix-command and flakes enabled; every variant of this host's system), auto (default: local)."
        ),
    ),
]
ToolchainOpt = Annotated[
    str,
    typer.Option(
        "--toolchain",
        help=(
            "Host C++ compiler/linker for Linux variants (and nvcc's -ccbin): zig (the pinned ziglang "
            "0.14.1 targeting glibc 2.28: manylinux_2_28-clean on any host; provisioned when missing), "
            "system (CXX or g++), auto (default: zig when installed or provisioning, else system)."
        ),
    ),
]
ProvisionOpt = Annotated[
    bool | None,
    typer.Option(
        "--provision/--no-provision",
        help=(
            "Install what selected variants lack and the matrix's [sources] provide — a torch build per "
            "torch version, a CUDA toolkit per version (PyPI cuda-toolkit), the pinned zig — into the user "
            "cache (atomically; reused by later runs). Default: on with --all."
        ),
    ),
]


@command("build", help=help_text.BUILD, packages=True)
def build(
    opts: Options,
    all_variants: AllOpt = False,
    variant: VariantOpt = [],  # noqa: B006
    jobs: JobsOpt = None,
    create_envs: CreateEnvsOpt = False,
    engine: EngineOpt = "auto",
    toolchain: ToolchainOpt = "auto",
    provision: ProvisionOpt = None,
) -> Run:
    from toolkit import build as build_stage

    request = build_stage.Request(
        all_variants,
        tuple(variant),
        create_envs=create_envs,
        engine=engine,
        toolchain=toolchain,
        # `build --all` (and --create-envs) provision what rows lack; --no-provision opts out
        provision=(all_variants or create_envs) if provision is None else provision,
        dry_run=opts.dry_run,
    )
    return Run(
        "planning the build",
        plan=_planner(request),
        execute=_executor(jobs, opts.json),
        preview=Planned,
        show=lambda result, o: (_print_plan if isinstance(result, Planned) else _print_report)(result, o),
        live=True,
        spinner=False,
    )
