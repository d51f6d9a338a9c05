"""`ggml-vendor variants`: the build matrix, each variant with its status on this machine (a view of the build
stage: toolkit/build/listing.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from toolkit import help as help_text
from toolkit.app import Options, Run, VariantOpt, command
from toolkit.core import ui
from toolkit.core.config import Config
from toolkit.core.stage import Log

if TYPE_CHECKING:
    from toolkit.build.listing import Listing


def _lister(patterns: list[str]) -> Callable[[Config, Log], Listing]:
    def plan(cfg: Config, _log: Log) -> Listing:
        from toolkit import build  # deferred: keeps CLI start-up light

        return build.view(cfg, build.Request(all_variants=True, patterns=tuple(patterns)))

    return plan


def _state(r: dict[str, Any]) -> tuple[str, str]:
    """A row's short status cell and the longer "with what / why not" text printed below the table."""
    if r["buildable"]:
        return f"buildable ({r['executor']})", ", ".join(x for x in (r["compiler"], r["torch_env"]) if x)
    if r["provision"]:
        return "provisionable", "installs " + ", ".join(r["provision"])
    return "elsewhere", r["reason"]


def _show(listing: Listing, opts: Options) -> None:
    from toolkit.build.report import table_lines, wrapped

    # Short cells in the table; the engine and the reason (long) below it, wrapped whole (a pipe or an
    # 80-column terminal must not cut them off).
    head = ("variant", "status", *(("torch / backend / toolkit / cpu / os",) if opts.verbose else ()))
    table, why = [head], []
    for r in listing.rows:
        state, what = _state(r)
        extra = (" / ".join(str(r[k] or "-") for k in ("torch", "backend", "toolkit", "cpu", "os")),)
        table.append((r["name"], state, *(extra if opts.verbose else ())))
        why += wrapped(f"  {r['name']}: ", f"{r['engine']}" + (f"; {what}" if what else ""))
    ui.out.print(f"{listing.matrix_label} on this host ({listing.host})")
    for line in [*table_lines(table), "engine, and why not / with what:", *why]:
        ui.out.print(line)
    n = sum(r["buildable"] for r in listing.rows)
    p = sum(bool(r["provision"]) for r in listing.rows)
    summary = (
        f"{n} of {len(listing.rows)} variants buildable here"
        + (f", {p} more after provisioning (`ggml-vendor build --all`)" if p else "")
        + "; the others name the engine that builds them."
    )
    for line in wrapped("", summary, ""):
        ui.out.print(line)


@command("variants", help=help_text.VARIANTS, dry_run=False, lock=False, packages=True)
def variants(opts: Options, variant: VariantOpt = []) -> Run[Listing, Listing]:  # noqa: B006
    return Run("reading the build matrix", plan=_lister(variant), show=_show)
