"""`ggml-vendor patch save | list | drop`: our changes to the vendored ggml, kept as vendor/patches/*.patch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit import help as help_text
from toolkit.app import Options, Run, app, command
from toolkit.core import ui
from toolkit.core.config import Config
from toolkit.core.errors import PatchError
from toolkit.core.stage import Log

patch_app = typer.Typer(
    name="patch", help=help_text.PATCH, no_args_is_help=True, add_completion=False, rich_markup_mode=None
)
app.add_typer(patch_app, name="patch")

MirrorOpt = Annotated[
    Path | None,
    typer.Option(
        "--mirror",
        envvar="GGML_VENDOR_MIRROR",
        help="Local clone to read the pinned upstream from instead of the network.",
    ),
]


def _config(cfg: Config, _log: Log) -> Config:
    """The patch workflow plans and acts in one call; its plan here is the request on the loaded project."""
    return cfg


def _description(message: str | None, message_file: Path | None) -> str | None:
    if message_file is None:
        return message
    if message is not None:
        raise PatchError("both -m and -F given", "pass the description one way")
    if not message_file.is_file():
        raise PatchError(f"{message_file} is not a readable file", "pass -F PATH to a text file")
    return message_file.read_text()


def _show_saved(res: Any, opts: Options) -> None:
    if opts.dry_run:
        verb = "would refresh" if res.refreshed else "would save"
    else:
        verb = "refreshed" if res.refreshed else "saved"
    ui.out.print(
        f"{verb} vendor/patches/{res.name}: {len(res.files)} file(s), +{res.added} -{res.removed} — {res.description}"
    )
    for f in res.files:
        ui.out.print(f"  {f}")


@command("save", help=help_text.PATCH_SAVE, group=patch_app, lock_name="patch")
def save(
    opts: Options,
    name: Annotated[str, typer.Argument(help="Patch name (e.g. gdn-decode); an existing one is refreshed.")],
    message: Annotated[
        str | None,
        typer.Option("--message", "-m", help="Description: first line the subject, then the body (why, before/after)."),
    ] = None,
    message_file: Annotated[
        Path | None, typer.Option("--file", "-F", help="Read the description from a file.", exists=False)
    ] = None,
    mirror: MirrorOpt = None,
) -> Run:
    from toolkit.sync.patch_workflow import save_patch

    msg = _description(message, message_file)
    return Run(
        "saving the patch",
        plan=_config,
        execute=lambda cfg, _log: save_patch(cfg, name, msg, mirror=mirror, dry_run=False),
        preview=lambda cfg: save_patch(cfg, name, msg, mirror=mirror, dry_run=True),
        show=_show_saved,
    )


@dataclass(frozen=True)
class PatchList:
    """The patch series' health at the pin or at `rev` (read-only)."""

    rev: str | None
    commit: str
    health: tuple[Any, ...]

    def to_json(self) -> dict[str, Any]:
        return {"rev": self.rev, "commit": self.commit, "patches": [h.to_json() for h in self.health]}


def _show_list(res: PatchList, opts: Options) -> None:
    from toolkit.sync.patch_workflow import HEALTH_CONFLICT

    where = f"{res.rev} ({res.commit[:12]})" if res.rev else f"the pin ({res.commit[:12]})"
    if not res.health:
        ui.out.print(f"no patches in vendor/patches (checked at {where})")
        return
    bad = sum(h.health == HEALTH_CONFLICT for h in res.health)
    ui.out.print(f"{len(res.health)} patch(es) at {where}" + (f": {bad} conflict(s)" if bad else ""))
    for h in res.health:
        ui.out.print(f"  {h.line()}")
        if opts.verbose:
            ui.out.print(f"    {h.to_json()}")


@command("list", help=help_text.PATCH_LIST, group=patch_app, lock_name="patch", dry_run=False)
def list_(
    opts: Options,
    rev: Annotated[
        str | None, typer.Option("--rev", "-r", help="Check against this revision instead of the pin.")
    ] = None,
    mirror: MirrorOpt = None,
) -> Run:
    from toolkit.sync.patch_workflow import list_patches

    def plan(cfg: Config, _log: Log) -> PatchList:
        commit, health = list_patches(cfg, rev=rev, mirror=mirror)
        return PatchList(rev, commit, tuple(health))

    return Run("checking the patches", plan=plan, show=_show_list, read_only=True)


@dataclass(frozen=True)
class Dropped:
    name: str
    written: bool

    def to_json(self) -> dict[str, Any]:
        return {"dropped": self.name, "written": self.written}


def _show_dropped(res: Dropped, _opts: Options) -> None:
    ui.out.print(f"{'dropped' if res.written else 'would drop'} vendor/patches/{res.name}")


@command("drop", help=help_text.PATCH_DROP, group=patch_app, lock_name="patch")
def drop(
    opts: Options,
    name: Annotated[str, typer.Argument(help="Patch file name, or its name without NNNN- and .patch.")],
    mirror: MirrorOpt = None,
) -> Run:
    from toolkit.sync.patch_workflow import drop_patch

    return Run(
        "dropping the patch",
        plan=_config,
        execute=lambda cfg, _log: Dropped(drop_patch(cfg, name, mirror=mirror, dry_run=False), True),
        preview=lambda cfg: Dropped(drop_patch(cfg, name, mirror=mirror, dry_run=True), False),
        show=_show_dropped,
    )
