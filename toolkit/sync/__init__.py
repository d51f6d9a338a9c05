"""The sync stage: upstream git -> vendor/ + vendor/UPSTREAM (the lock).

The stage protocol (the same in every stage package):
    plan(config, request, log) -> Plan     resolve the revision, compute the closure, patches, lock and drift;
                                           writes nothing in the project (print it for --dry-run)
    execute(plan, log) -> Report           swap the new vendor/ in atomically, write the drift report
The work is in stage.py; the helpers (upstream, closure, patches, vendor_tree, drift, embedded) beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolkit.core.stage import Log, quiet

if TYPE_CHECKING:
    from toolkit.core.config import Config
    from toolkit.sync.stage import Prepared as Plan
    from toolkit.sync.stage import SyncReport as Report
    from toolkit.sync.stage import SyncRequest as Request

__all__ = ["Request", "Plan", "Report", "plan", "execute", "interrupted"]
_TYPES = {"Request": "SyncRequest", "Plan": "Prepared", "Report": "SyncReport"}


def __getattr__(name: str) -> object:
    """Request, Plan and Report, imported on first use (the stage pulls in git; helpers like
    toolkit.sync.vendor_tree stay light to import)."""
    if name in _TYPES:
        from toolkit.sync import stage

        return getattr(stage, _TYPES[name])
    raise AttributeError(name)


def plan(config: Config, request: Request, log: Log = quiet) -> Plan:
    """What `sync` would do (see toolkit.sync.stage.prepare); --dry-run prints it."""
    from toolkit.sync.stage import prepare

    return prepare(config, request, progress=log)


def execute(plan: Plan, log: Log = quiet) -> Report:
    """Carry the plan out (see toolkit.sync.stage.execute)."""
    from toolkit.sync.stage import execute as run

    return run(plan, progress=log)


def interrupted(plan: Plan) -> Exception:
    """The one-line Interrupted error (exit 130) for a Ctrl-C after `plan` was made, saying what vendor/ holds."""
    from toolkit.sync.stage import interrupted as state

    return state(plan)
