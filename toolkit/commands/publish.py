"""`ggml-vendor publish`: ship verified build/ variants to the Hub (or a git remote) with a plan first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolkit import help as help_text
from toolkit.app import Options, Run, command
from toolkit.core import ui
from toolkit.core.config import Config
from toolkit.core.errors import ConfigError
from toolkit.core.stage import Log

if TYPE_CHECKING:
    from toolkit import publish as publish_stage
    from toolkit.publish.stage import PublishResult


def _show(result: PublishResult, _opts: Options) -> None:
    for line in result.plan.lines():
        ui.out.print(line)
    for name, status in sorted(result.conformance.items()):
        ui.out.print(f"  {name}: conformance: {status}")
    checked = result.verified.get("files_checked", 0)
    if result.status == "dry-run":
        ui.note("dry run:", "nothing was pushed", style="yellow")
    elif result.status == "up-to-date":
        ui.note(
            "up to date",
            f"— {result.target} already holds these files ({checked} re-checked); report: {result.report_path}",
        )
    else:
        prs = f"; pull requests: {', '.join(result.pull_requests)}" if result.pull_requests else ""
        ui.note(
            "published",
            f"to {result.target} in {len(result.commits)} commit(s), "
            f"{checked} files re-listed and matched{prs}; report: {result.report_path}",
        )


def _planner(
    request: publish_stage.Request, *, repo: str | None, report: Path | None, packages: tuple[str, ...]
) -> Callable[[Config, Log], publish_stage.Plan]:
    from toolkit import publish as publish_stage

    def plan(cfg: Config, log: Log) -> publish_stage.Plan:
        for flag, value in (("--repo", repo), ("--report", report)):
            if value is not None and len(cfg.selected(packages)) > 1:
                raise ConfigError(
                    f"{flag} names one target but several packages are selected",
                    "add --package NAME (each package publishes to its own hub-repo, reports into its build/)",
                )
        return publish_stage.plan(cfg, request, log)

    return plan


@command("publish", help=help_text.PUBLISH, packages=True)
def publish(
    opts: Options,
    variants: Annotated[list[str] | None, typer.Argument(help="Variant names under build/ (default: all).")] = None,
    repo: Annotated[
        str | None, typer.Option("--repo", help="Hub repo id (default: hub-repo from pyproject.toml).")
    ] = None,
    to: Annotated[
        str | None,
        typer.Option("--to", help="Push to this git remote (URL or path) with git-lfs instead of the Hub HTTP API."),
    ] = None,
    create_pr: Annotated[
        bool,
        typer.Option(
            "--create-pr", help="Open pull requests instead of pushing to the branches (the branch must exist)."
        ),
    ] = False,
    endpoint: Annotated[
        str | None, typer.Option("--endpoint", help="Hub URL (default: HF_ENDPOINT or https://huggingface.co).")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token", help="Write token (default: HF_TOKEN or the stored login). Never printed.", show_default=False
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="Where to write the JSON report (default: build/publish-report.json)."),
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Operations per commit.")] = 1000,
) -> Run[publish_stage.Plan, PublishResult]:
    from toolkit import publish as publish_stage

    request = publish_stage.Request(
        tuple(variants or ()),
        repo=repo,
        to=to,
        endpoint=endpoint,
        token=token,
        create_pr=create_pr,
        batch_size=batch_size,
        report=report,
    )

    return Run(
        "publishing",
        plan=_planner(request, repo=repo, report=report, packages=opts.packages),
        execute=publish_stage.execute,
        preview=lambda plan: plan.preview,
        show=_show,
        live=True,
        interrupted=publish_stage.interrupted,
    )
