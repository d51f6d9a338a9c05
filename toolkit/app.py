"""The typer application, the one command shape (`@command`: shared options in, a `Run` out) and the one place
that turns failures into exit codes. Command help texts are in toolkit/help.py.

A command module is a request builder and a printer: its function takes the shared `Options` and its own
options, and returns a `Run` (how to plan, how to execute, how to print; toolkit/runner.py). `@command` adds
the shared options to its signature, takes the project lock, and hands the Run to `perform` (runner.py),
which does the rest the same way for every command.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit import help as help_text
from toolkit.core import ui
from toolkit.core.config import load
from toolkit.core.errors import Interrupted, VendorError
from toolkit.runner import Acted, AnyRun, Options, P, Run, S, perform, stage_run

__all__ = ["app", "command", "guarded", "perform", "stage_run", "Options", "Run", "AnyRun"]

app = typer.Typer(
    name="ggml-vendor",
    help=help_text.APP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help text is printed literally: rich markup would eat "[sources]", "[torch-index]" and the like.
    rich_markup_mode=None,
)

# Shared option types, so every command spells them the same way.
ProjectOpt = Annotated[
    Path | None,
    typer.Option(
        "--project", "-C", help="Kernel package repository (default: found upwards from the cwd).", show_default=False
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a JSON document on stdout instead of tables.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan and change nothing.")]
VerboseOpt = Annotated[
    bool,
    typer.Option("--verbose", "-v", help="Show progress and details as they happen, and the traceback of an error."),
]
# `--variant` has no short form: `-v` is --verbose in every command.
VariantOpt = Annotated[
    list[str], typer.Option("--variant", help="Only variants whose name matches this glob (repeatable).")
]
# A project may hold a family of packages ([tool.ggml-vendor.packages.<name>]); per-package commands take
# `--package/-p NAME` (repeatable) and otherwise run for every package, the first one first.
PackageOpt = Annotated[
    list[str],
    typer.Option(
        "--package",
        "-p",
        help="Only this package of the project (repeatable; default: every package, in pyproject.toml order).",
        show_default=False,
    ),
]
NoWaitOpt = Annotated[
    bool,
    typer.Option(
        "--no-wait",
        help="If another ggml-vendor command is using this project, refuse (exit 4) instead of waiting for it.",
    ),
]


def _recover_build_dirs(opts: Options) -> None:
    """Put back what a killed run's journaled swap left moved aside in each package's build/ (collect's and
    build's fallback where the filesystem cannot exchange two directories), before the command reads it."""
    from toolkit.core import fs

    try:
        views = load(opts.project).selected()
    except VendorError:
        return  # no usable config: the command itself says so
    for view in views:
        fs.recover_swaps(view.build_dir)


def _locked(run: Run[P, S], opts: Options, command: str, acted: Acted) -> None:
    """`perform` under the project lock: held from the plan to the report (a second command waits, or
    with --no-wait refuses), shared for commands that only read. Every command first rolls back the swaps
    killed runs left half done in build/ (as sync's journal is recovered for vendor/)."""
    from toolkit.core.config import find_root
    from toolkit.core.projectlock import project_lock

    root = find_root(opts.project)
    with project_lock(
        root,
        command=command,
        shared=run.read_only or opts.dry_run,
        wait=opts.wait,
        on_wait=lambda msg: ui.warn("waiting:", msg),
    ):
        _recover_build_dirs(opts)  # only a dead writer's journal is acted on (fs.recover_swap checks its pid)
        perform(run, opts, acted)


def guarded(body: Callable[[], None], verbose: bool, acted: Acted | None = None) -> None:
    """Run a command body; a VendorError becomes one red line and its exit code, preceded by the traceback
    with --verbose (or GGML_VENDOR_VERBOSE=1); Ctrl-C exits 130 saying what the command's stages hold,
    read back (`acted`: even once perform has returned, as the project lock is released), else that the
    previous state was kept."""
    with contextlib.suppress(ValueError):  # not the main thread: signals go elsewhere anyway
        # From here a Ctrl-C is a KeyboardInterrupt again (the entry point's start-up handler exits at once).
        if getattr(signal.getsignal(signal.SIGINT), "__name__", "") == "_interrupted_while_starting":
            signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        body()
    except Interrupted as exc:
        ui.warn("interrupted:", exc.one_line())
        raise typer.Exit(exc.exit_code) from None
    except VendorError as exc:
        if verbose or os.environ.get("GGML_VENDOR_VERBOSE"):
            import traceback

            traceback.print_exc()
        ui.error(exc.one_line())
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        told = acted.interrupted() if acted is not None else None
        ui.warn("interrupted:", told.one_line() if isinstance(told, VendorError) else "previous state kept")
        raise typer.Exit(Interrupted.exit_code) from None


def _shared_parameters(dry_run: bool, lock: bool, packages: bool) -> list[inspect.Parameter]:
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("package", kw, default=[], annotation=PackageOpt)] if packages else []
    params += [
        inspect.Parameter("project", kw, default=None, annotation=ProjectOpt),
        inspect.Parameter("as_json", kw, default=False, annotation=JsonOpt),
        inspect.Parameter("verbose", kw, default=False, annotation=VerboseOpt),
    ]
    if dry_run:
        params.append(inspect.Parameter("dry_run", kw, default=False, annotation=DryRunOpt))
    if lock:
        params.append(inspect.Parameter("no_wait", kw, default=False, annotation=NoWaitOpt))
    return params


def _root_project(ctx: typer.Context) -> Path | None:
    """`-C` given before the subcommand (`ggml-vendor -C path build`), kept by the group callback."""
    obj = ctx.find_root().obj
    return obj.get("project") if isinstance(obj, dict) else None


def _resolved(fn: Callable[..., Any], annotation: Any) -> Any:
    """An annotation as an object (a module with `from __future__ import annotations` keeps strings)."""
    if not isinstance(annotation, str):
        return annotation
    return eval(annotation, fn.__globals__)


def command(
    name: str,
    *,
    help: str,
    group: typer.Typer | None = None,
    dry_run: bool = True,
    lock: bool = True,
    lock_name: str | None = None,
    packages: bool = False,
) -> Callable[[Callable[..., AnyRun]], Callable[..., AnyRun]]:
    """Register `fn(opts, **own_options) -> Run` as the command `name` (of `group`, default the app): its own
    options plus the shared ones (--project/-C, --json, --verbose/-v, and --dry-run / --no-wait / --package
    where `dry_run` / `lock` / `packages`), then `perform` its Run (under the project lock, held as
    `lock_name`, when `lock`; once per selected package when `packages`)."""

    def register(fn: Callable[..., AnyRun]) -> Callable[..., AnyRun]:
        # The first parameter is the Options object the wrapper builds; the others are the command's options.
        own = [
            p.replace(annotation=_resolved(fn, p.annotation))
            for p in list(inspect.signature(fn).parameters.values())[1:]
        ]
        context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
        params = [*own, *_shared_parameters(dry_run, lock, packages), context]

        def cli(**kwargs: Any) -> None:
            ctx = kwargs.pop("ctx")
            opts = Options(
                project=kwargs.pop("project") or _root_project(ctx),
                json=kwargs.pop("as_json"),
                verbose=kwargs.pop("verbose"),
                dry_run=kwargs.pop("dry_run", False),
                wait=not kwargs.pop("no_wait", False),
                packages=tuple(kwargs.pop("package", ())),
            )

            acted = Acted()  # what the Run sets out to change, read back on a Ctrl-C

            def body() -> None:
                run = replace(fn(opts, **kwargs), per_package=packages)
                (_locked(run, opts, lock_name or name, acted) if lock else perform(run, opts, acted))

            guarded(body, opts.verbose, acted)

        cli.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        cli.__annotations__ = {p.name: p.annotation for p in params}
        cli.__doc__ = fn.__doc__
        (group or app).command(name, help=help)(cli)
        return fn

    return register


@app.callback()
def _root(ctx: typer.Context, project: ProjectOpt = None) -> None:
    """Keeps `ggml-vendor` a command group even when the CLI registers only the one command it runs, and takes
    `-C/--project` before the subcommand too (the one after it wins)."""
    ctx.ensure_object(dict)["project"] = project
