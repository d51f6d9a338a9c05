"""The typer application, the one command shape (`@command`: shared options in, a `Run` out) and the one place
that turns failures into exit codes. Command help texts are in toolkit/help.py.

A command module is a request builder and a printer: its function takes the shared `Options` and its own
options, and returns a `Run` (how to plan, how to execute, how to print). `@command` adds the shared options
to its signature, and `perform` does the rest the same way for every command: load the config, take the
project lock, plan and execute in one `ui.task` (quiet on success, the captured log replayed on a crash),
print tables or `--json`, and exit with `core.stage.exit_code_of(report)` (and `failure_of`'s one line).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar, cast

import typer

from toolkit import help as help_text
from toolkit.core import ui
from toolkit.core.config import Config, load
from toolkit.core.errors import ConfigError, Interrupted, VendorError
from toolkit.core.stage import Log, Outcome, Shown, Stage, failure_of

R = TypeVar("R")  # a stage's request

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


@dataclass(frozen=True)
class Options:
    """The options every command shares (`dry_run` and `wait` only where the command offers them)."""

    project: Path | None = None
    json: bool = False
    verbose: bool = False
    dry_run: bool = False
    wait: bool = True
    packages: tuple[str, ...] = ()  # --package/-p (empty: every package), where the command is per package


P = TypeVar("P")  # what a Run's plan returns
S = TypeVar("S", bound=Shown)  # what a Run shows: its report, or under --dry-run its preview of the plan


@dataclass(frozen=True)
class Run(Generic[P, S]):
    """What a command does, as the runner needs it.

    `plan(config, log)` reads and decides; `execute(plan, log)` acts and returns a protocol Report (None: the
    plan is the result, e.g. read-only listings); `show(result, options)` prints tables: the report, or under
    --dry-run what `preview(plan)` makes of the plan (without a preview, the plan itself: such a Run's show
    takes its plan as well as its report). `read_only` takes the project lock shared (checks); a Run made
    by `Run.alone` needs no project: its plan takes the log only; `live` shows the log as it happens even
    without --verbose (long, multi-stage work); `spinner=False` for work that draws its own progress bars.
    `per_package` (set by `@command(packages=True)`) runs it once per selected package; `one_package`:
    exactly one may be selected. `interrupted(plan)` is the error for a Ctrl-C once execute may have acted
    (default: "previous state kept"). `announce`: the plan's `notes` are printed as warnings once it is
    made, and with --verbose (neither --dry-run nor --json) its lines before execute runs it."""

    label: str | Callable[[Config], str]  # the task's label, or a function of the config it runs under
    plan: Callable[[Config, Log], P]
    execute: Callable[[P, Log], S] | None = None
    show: Callable[[S, Options], None] | None = None
    preview: Callable[[P], S] | None = None
    read_only: bool = False
    live: bool = False
    spinner: bool = True
    per_package: bool = False
    one_package: bool = False
    interrupted: Callable[[P], Exception] | None = None
    announce: bool = False
    plan_alone: Callable[[Log], P] | None = None  # set by Run.alone: the plan of a Run that needs no project

    @property
    def config(self) -> bool:
        """Whether the runner loads the project (and takes its lock) to plan this Run."""
        return self.plan_alone is None

    @classmethod
    def alone(
        cls,
        label: str,
        plan: Callable[[Log], P],
        *,
        execute: Callable[[P, Log], S] | None = None,
        show: Callable[[S, Options], None] | None = None,
        live: bool = False,
    ) -> Run[P, S]:
        """A Run that needs no project (the demo makes its own): `plan(log)`."""
        return cls(label, plan=_needs_a_project, execute=execute, show=show, live=live, plan_alone=plan)

    def planned(self, cfg: Config | None, log: Log) -> P:
        """The plan, under `cfg` (None only for a Run made by `Run.alone`)."""
        if self.plan_alone is not None:
            return self.plan_alone(log)
        if cfg is None:
            raise ConfigError("this command needs the project and was run without one", "pass -C PATH")
        return self.plan(cfg, log)

    def shown(self, plan: P) -> S:
        """What --dry-run shows of `plan`: its preview, else the plan itself (see the class's doc)."""
        if self.preview is not None:
            return self.preview(plan)
        return cast(S, plan)  # a Run without a preview shows its plan as it shows its report


# What `@command` registers: each command's Run has its own plan and report types; the decorator only hands
# it on to `perform`, which is generic in them.
AnyRun = Run[Any, Any]


def _needs_a_project(_cfg: Config, _log: Log) -> Any:
    raise AssertionError("a Run made by Run.alone is planned by its plan_alone")


def stage_run(
    label: str | Callable[[Config], str],
    stage: Stage[R, P, S],
    request: R,
    *,
    show: Callable[[S, Options], None] | None = None,
    read_only: bool = False,
    live: bool = False,
    spinner: bool = True,
    one_package: bool = False,
    interrupted: Callable[[P], Exception] | None = None,
    announce: bool = False,
) -> Run[P, S]:
    """The Run of a stage package that follows the protocol to the letter (toolkit.core.stage.Stage, checked
    by mypy): `stage.plan(config, request, log)` then `stage.execute(plan, log)`."""

    def plan(cfg: Config, log: Log) -> P:
        return stage.plan(cfg, request, log)

    return Run(
        label,
        plan=plan,
        execute=stage.execute,
        show=show,
        read_only=read_only,
        live=live,
        spinner=spinner,
        one_package=one_package,
        interrupted=interrupted,
        announce=announce,
    )


def _lines_of(result: object) -> list[str]:
    """What a plan or report prints: its `lines()` (a listing without them prints through its Run's show)."""
    lines = getattr(result, "lines", None)
    return list(lines()) if callable(lines) else []


def _print_lines(result: Shown, _opts: Options) -> None:
    """The default printer: the result's lines on stdout (plain text: they name [tables] and paths, never
    markup), and on stderr the `problems()` lines of a report that has them (a failed step's output)."""
    for line in _lines_of(result):
        ui.out.print(line)
    for line in getattr(result, "problems", list)():
        ui.err.print(line)


def _announce(plan: object, opts: Options) -> None:
    """Run.announce: the plan's notes, and under --verbose what is about to run before running it."""
    for note in getattr(plan, "notes", ()):
        ui.warn("note:", note)
    if opts.verbose and not opts.dry_run and not opts.json:
        for line in _lines_of(plan):
            ui.out.print(line)


def _emit(result: S, run: Run[P, S], opts: Options) -> None:
    if opts.json:
        doc = result.to_json()
        ui.emit_json({"dry_run": True, **doc} if opts.dry_run and run.execute is not None else doc)
    elif run.show is not None:
        run.show(result, opts)
    else:
        _print_lines(result, opts)


def _perform_one(run: Run[P, S], opts: Options, cfg: Config | None) -> None:
    verbose = opts.verbose or (run.live and not opts.json)
    planned = False
    plan: P | None = None
    try:
        label = run.label(cfg) if callable(run.label) and cfg is not None else str(run.label)
        with ui.task(label, verbose=verbose, quiet=opts.json, spinner=run.spinner) as task:
            plan = run.planned(cfg, task.log)
            planned = True
            if run.announce:
                _announce(plan, opts)
            if run.execute is not None and not opts.dry_run:
                result = run.execute(plan, task.log)
            else:
                result = run.shown(plan)
        _emit(result, run, opts)
    except KeyboardInterrupt:
        if not planned or opts.dry_run or run.interrupted is None:
            raise  # nothing was carried out: the previous state was kept
        # Once the plan may have been carried out, the stage says what the tree now holds.
        raise run.interrupted(cast(P, plan)) from None
    failure = failure_of(result) if isinstance(result, Outcome) else None
    if failure is not None:
        raise failure


def _views(run: Run[P, S], opts: Options) -> tuple[Config, ...]:
    """The configs `run` runs under: the project's, or one view per selected package."""
    cfg = load(opts.project)
    if not run.per_package:
        return (cfg,)
    views = cfg.selected(opts.packages)
    if run.one_package and len(views) > 1:
        raise ConfigError(
            f"the project holds {len(views)} packages and this command works on one package's build/",
            f"add --package NAME (one of {', '.join(v.name for v in views)})",
        )
    return views


def perform(run: Run[P, S], opts: Options) -> None:
    """Plan, execute (unless --dry-run) and print `run` under the project's config; a report that is not
    ok ends the command with its exit code. Per package: one package selected is exactly the one-package
    command; several get a heading each on stderr and, with --json, one document {"packages": {name: doc}}
    (printed even when a package fails, that package's document included); the first failure stops the
    loop, its one line naming the package."""
    if not run.config:
        _perform_one(run, opts, None)
        return
    views = _views(run, opts)
    if len(views) == 1:
        _perform_one(run, opts, views[0])
        return
    docs: dict[str, Any] = {}
    try:
        for view in views:
            if not opts.json:
                ui.err.print(ui.labelled("package", "bold", view.name))
            with ui.collect_json() as collected:
                try:
                    _perform_one(run, opts, view)
                except VendorError as exc:
                    exc.message = f"package {view.name}: {exc.message}"
                    raise
                finally:  # a failing package's document (e.g. render --check's drift) is still printed
                    if collected:
                        docs[view.name] = collected[0] if len(collected) == 1 else list(collected)
    finally:
        if opts.json:
            ui.emit_json({"packages": docs})


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


def _locked(run: Run[P, S], opts: Options, command: str) -> None:
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
        perform(run, opts)


def guarded(body: Callable[[], None], verbose: bool) -> None:
    """Run a command body; a VendorError becomes one red line and its exit code, preceded by the traceback
    with --verbose (or GGML_VENDOR_VERBOSE=1); Ctrl-C keeps the previous state and exits 130."""
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
        ui.warn("interrupted:", "previous state kept")
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

            def body() -> None:
                run = replace(fn(opts, **kwargs), per_package=packages)
                (_locked(run, opts, lock_name or name) if lock else perform(run, opts))

            guarded(body, opts.verbose)

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
