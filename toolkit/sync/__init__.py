"""The sync stage: upstream git -> vendor/ + vendor/UPSTREAM (the lock).

The stage protocol (the same in every stage package):
    plan(config, request) -> Plan     resolve the revision, compute the closure, patches, lock and drift;
                                      writes nothing in the project (print it for --dry-run)
    execute(plan) -> Report           swap the new vendor/ in atomically, write the drift report
The work is in stage.py; the helpers (upstream, closure, patches, vendor_tree, drift, embedded) beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolkit.core.config import Config
    from toolkit.sync.stage import Prepared as Plan
    from toolkit.sync.stage import SyncReport as Report
    from toolkit.sync.stage import SyncRequest as Request

__all__ = ["Request", "Plan", "Report", "plan", "execute"]
_TYPES = {"Request": "SyncRequest", "Plan": "Prepared", "Report": "SyncReport"}


def __getattr__(name: str) -> object:
    """Request, Plan and Report, imported on first use (the stage pulls in git; helpers like
    toolkit.sync.vendor_tree stay light to import)."""
    if name in _TYPES:
        from toolkit.sync import stage

        return getattr(stage, _TYPES[name])
    raise AttributeError(name)


def plan(config: Config, request: Request, *, progress: Callable[[str], object] | None = None) -> Plan:
    from toolkit.sync.stage import prepare

    return prepare(config, request, progress=progress)


def execute(plan: Plan, *, progress: Callable[[str], object] | None = None) -> Report:
    from toolkit.sync.stage import execute as run

    return run(plan, progress=progress)
