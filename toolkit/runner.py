"""The runner: what a command does (`Run`: plan, execute, show), and `perform`, which does it the same way
for every command: load the config (one view per selected package), plan and execute in one `ui.task` (quiet
on success, the captured log replayed on a crash), print tables or `--json`, and end with the report's exit
code (`core.stage.failure_of`'s one line). Typed by the stage protocol: a Run is generic in its plan and what
it shows, and `stage_run` takes a stage package as a `core.stage.Stage`. toolkit/app.py registers commands
and holds the project lock around `perform`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar, cast

from toolkit.core import ui
from toolkit.core.config import Config, load
from toolkit.core.errors import ConfigError, Interrupted, VendorError
from toolkit.core.interrupts import no_interrupt
from toolkit.core.stage import Log, Outcome, Shown, Stage, failure_of

R = TypeVar("R")  # a stage's request


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
    exactly one may be selected. `interrupted(plan)` is the error for a Ctrl-C once execute may have acted,
    read back (default: "previous state kept"; see `Acted`). `announce`: the plan's `notes` are printed as warnings once it is
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
        interrupted: Callable[[P], Exception] | None = None,
    ) -> Run[P, S]:
        """A Run that needs no project (the demo makes its own): `plan(log)`."""
        return cls(
            label,
            plan=_needs_a_project,
            execute=execute,
            show=show,
            live=live,
            interrupted=interrupted,
            plan_alone=plan,
        )

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


def _needs_a_project(_cfg: Config, _log: Log) -> NoReturn:
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


@dataclass
class Acted:
    """What a command has set out to change so far: for each package whose plan is made (its execute may have
    acted), how its stage reads back what it holds now (`Run.interrupted`). A Ctrl-C anywhere after the first
    (a later package's plan, the printing, the project lock's release) is told from these, read back; only
    before them was the previous state kept. `packages` names the packages of a several-package command."""

    readbacks: list[tuple[str, Callable[[], Exception]]] = field(default_factory=list)
    packages: tuple[str, ...] = ()

    def interrupted(self) -> Exception | None:
        """The one error for a Ctrl-C now (None: nothing was carried out, the previous state is kept)."""
        if not self.readbacks:
            return None
        with no_interrupt():
            found = [(name, readback()) for name, readback in self.readbacks]
        if not self.packages:
            return found[-1][1]
        told = dict(found)
        parts = [f"package {n}: {_line(told[n])}" if n in told else f"package {n}: not changed" for n in self.packages]
        return Interrupted("; ".join(parts))


def _line(exc: Exception) -> str:
    return exc.one_line() if isinstance(exc, VendorError) else str(exc)


def _perform_one(run: Run[P, S], opts: Options, cfg: Config | None, acted: Acted) -> None:
    verbose = opts.verbose or (run.live and not opts.json)
    label = run.label(cfg) if callable(run.label) and cfg is not None else str(run.label)
    with ui.task(label, verbose=verbose, quiet=opts.json, spinner=run.spinner) as task:
        plan = run.planned(cfg, task.log)
        if run.interrupted is not None and not opts.dry_run:
            # Once the plan may be carried out, the stage says what the tree holds (a Ctrl-C before it kept it).
            readback, name = run.interrupted, cfg.name if cfg is not None else ""
            acted.readbacks.append((name, lambda: readback(plan)))
        if run.announce:
            _announce(plan, opts)
        if run.execute is not None and not opts.dry_run:
            result = run.execute(plan, task.log)
        else:
            result = run.shown(plan)
    _emit(result, run, opts)
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


def perform(run: Run[P, S], opts: Options, acted: Acted | None = None) -> None:
    """Plan, execute (unless --dry-run) and print `run` under the project's config; a report that is not
    ok ends the command with its exit code. Per package: one package selected is exactly the one-package
    command; several get a heading each on stderr and, with --json, one document {"packages": {name: doc}}
    (printed even when a package fails, that package's document included); the first failure stops the
    loop, its one line naming the package. A Ctrl-C once a plan is made is told from `acted` (read back)."""
    acted = acted if acted is not None else Acted()
    try:
        _perform_all(run, opts, acted)
    except KeyboardInterrupt:
        told = acted.interrupted()
        if told is None:
            raise  # nothing was carried out: the previous state was kept
        raise told from None


def _perform_all(run: Run[P, S], opts: Options, acted: Acted) -> None:
    if not run.config:
        _perform_one(run, opts, None, acted)
        return
    views = _views(run, opts)
    if len(views) == 1:
        _perform_one(run, opts, views[0], acted)
        return
    acted.packages = tuple(v.name for v in views)
    docs: dict[str, Any] = {}
    try:
        for view in views:
            if not opts.json:
                ui.err.print(ui.labelled("package", "bold", view.name))
            with ui.collect_json() as collected:
                try:
                    _perform_one(run, opts, view, acted)
                except VendorError as exc:
                    exc.message = f"package {view.name}: {exc.message}"
                    raise
                finally:  # a failing package's document (e.g. render --check's drift) is still printed
                    if collected:
                        docs[view.name] = collected[0] if len(collected) == 1 else list(collected)
    finally:
        if opts.json:
            ui.emit_json({"packages": docs})
