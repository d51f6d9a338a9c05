"""The patch stage (`ggml-vendor patch save | drop`): our changes to the vendored ggml, kept as
vendor/patches/*.patch, through the one protocol (toolkit.core.stage.Stage).

    plan(config, request, log) -> Plan     save: the patch a save would write (the edits in vendor/ against the
                                           pristine pin); drop: the series without it; writes nothing
    execute(plan, log) -> Report           write vendor/ and its lock atomically (patch_workflow.py)
`patch list` is a query (it reads and reports, nothing to execute): patch_workflow.list_patches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from toolkit.core.config import Config
from toolkit.core.errors import Interrupted
from toolkit.core.stage import Log, quiet
from toolkit.sync import patch_workflow as wf
from toolkit.sync.patch_workflow import DropPlan, DropReport, SavePlan, SaveResult

Plan = SavePlan | DropPlan
Report = SaveResult | DropReport

__all__ = ["Request", "Plan", "Report", "plan", "execute", "interrupted"]


@dataclass(frozen=True)
class Request:
    """Save the edits in vendor/ as the patch `name` (refreshed when it exists), or drop the patch `name`."""

    action: Literal["save", "drop"]
    name: str
    message: str | None = None  # save: the description (first line the subject)
    mirror: Path | None = None  # a local clone to read the pinned upstream from instead of the network


def plan(config: Config, request: Request, log: Log = quiet) -> Plan:
    """What a save or drop would write; reads vendor/ and the pinned upstream only."""
    if request.action == "save":
        return wf.plan_save(config, request.name, request.message, mirror=request.mirror)
    return wf.plan_drop(config, request.name, mirror=request.mirror)


def execute(plan: Plan, log: Log = quiet) -> Report:
    """Write the planned vendor/ and lock (atomically)."""
    if isinstance(plan, SavePlan):
        return wf.execute_save(plan)
    return wf.execute_drop(plan)


def interrupted(plan: Plan) -> Interrupted:
    """The one-line Interrupted error (exit 130) for a Ctrl-C after `plan` was made: what vendor/ holds."""
    return wf.interrupted(plan)
