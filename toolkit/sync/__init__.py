"""The sync stage: upstream git -> vendor/ + vendor/UPSTREAM (the lock).

The stage protocol (the same in every stage package):
    plan(config, request, log) -> Plan     resolve the revision, read vendor/ once, compute the closure,
                                           patches, lock and drift; writes nothing, recovers nothing
    execute(plan, log) -> Report           recover a killed sync's half swap, swap the new vendor/ in
                                           atomically, write the drift report
The work is split by job beside this file: tree_plan (the pure plan), project_plan (the plan against the
project), execution, report, licenses; the helpers (upstream, closure, patches, vendor_tree, drift,
embedded) beside them. Other stages read vendor/ through this face: `check_vendor`, `read_vendor` and
`patch_descriptions`.
"""

from __future__ import annotations

from toolkit.core.config import Config
from toolkit.core.stage import Log, quiet
from toolkit.sync import execution, project_plan
from toolkit.sync.patch_workflow import patch_descriptions
from toolkit.sync.project_plan import Prepared as Plan
from toolkit.sync.project_plan import SyncRequest as Request
from toolkit.sync.report import SyncReport as Report
from toolkit.sync.vendor_tree import TreeFinding, VendorState, check_vendor, read_vendor, tree_on_record

__all__ = [
    "Request",
    "Plan",
    "Report",
    "plan",
    "execute",
    "interrupted",
    "check_vendor",
    "read_vendor",
    "tree_on_record",
    "TreeFinding",
    "VendorState",
    "patch_descriptions",
]


def plan(config: Config, request: Request, log: Log = quiet) -> Plan:
    """What `sync` would do (see project_plan.prepare); --dry-run prints it."""
    return project_plan.prepare(config, request, progress=log)


def execute(plan: Plan, log: Log = quiet) -> Report:
    """Carry the plan out (see execution.execute)."""
    return execution.execute(plan, progress=log)


def interrupted(plan: Plan) -> Exception:
    """The one-line Interrupted error (exit 130) for a Ctrl-C after `plan` was made, saying what vendor/ holds."""
    return execution.interrupted(plan)
