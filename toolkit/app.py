"""The typer application object, the options every command shares, and the one place that turns failures
into exit codes. Command help texts are in toolkit/help.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit import help as help_text
from toolkit.core import ui
from toolkit.core.errors import Interrupted, VendorError

app = typer.Typer(
    name="ggml-vendor",
    help=help_text.APP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


def for_each_package(project: Path | None, packages: list[str], body: Callable[[Any], None], *, as_json: bool) -> None:
    """Run a command body once per selected package (a Config view each, toolkit.core.config.Config.selected).

    One package selected: exactly the one-package command (same output, same JSON document). Several: a
    heading per package on stderr and, with --json, one document {"packages": {name: document}}. The first
    failure stops the loop; its one line names the package."""
    from toolkit.core.config import load

    views = load(project).selected(packages)
    if len(views) == 1:
        body(views[0])
        return
    docs: dict[str, Any] = {}
    try:
        for view in views:
            if not as_json:
                ui.err.print(ui.labelled("package", "bold", view.name))
            with ui.collect_json() as collected:
                try:
                    body(view)
                except VendorError as exc:
                    exc.message = f"package {view.name}: {exc.message}"
                    raise
                finally:  # a failing package's document (e.g. render --check's drift) is still printed
                    if collected:
                        docs[view.name] = collected[0] if len(collected) == 1 else list(collected)
    finally:
        if as_json:
            ui.emit_json({"packages": docs})


NoWaitOpt = Annotated[
    bool,
    typer.Option(
        "--no-wait",
        help="If another ggml-vendor command is using this project, refuse (exit 4) instead of waiting for it.",
    ),
]


@dataclass(frozen=True)
class Locked:
    """The project lock a command holds from its plan to its report (see toolkit.core.projectlock).
    `shared` for commands that only read the project (checks, dry runs)."""

    project: Path | None
    command: str
    no_wait: bool = False
    shared: bool = False


def run_guarded(fn, *args, verbose: bool = False, lock: Locked | None = None, **kwargs):  # type: ignore[no-untyped-def]
    """Run a command body (under the project lock when `lock` is given); a VendorError becomes one red
    line and its exit code, preceded by the traceback with --verbose (or GGML_VENDOR_VERBOSE=1)."""
    try:
        if lock is None:
            return fn(*args, **kwargs)
        from toolkit.core.config import find_root
        from toolkit.core.projectlock import project_lock

        root = find_root(lock.project)
        with project_lock(
            root,
            command=lock.command,
            shared=lock.shared,
            wait=not lock.no_wait,
            on_wait=lambda msg: ui.warn("waiting:", msg),
        ):
            return fn(*args, **kwargs)
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


@app.callback()
def _root() -> None:
    """Keeps `ggml-vendor` a command group even when the CLI registers only the one command it runs."""
