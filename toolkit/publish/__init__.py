"""The publish stage: verified build/ variants -> branch v<N> of a Hub kernel repo (or a git remote).

The stage protocol (toolkit/core/stage.py):
    plan(config, request, log) -> Plan      preflight (offline, read-only), read the live repository and diff
                                             it against build/ (diff.py), cut the changes into commit batches;
                                             pushes and writes nothing
    execute(plan, log) -> Report             push exactly those batches, each guarded by the head the plan
                                             read (a branch that moved since is refused, not overwritten),
                                             re-list and compare, write the report (hub.py over the HTTP
                                             API, git.py with git-lfs)
"""

from __future__ import annotations

from toolkit.core.config import Config
from toolkit.core.stage import Log, quiet
from toolkit.publish.stage import Plan, Report, Request

__all__ = ["Request", "Plan", "Report", "plan", "execute", "interrupted"]


def plan(config: Config, request: Request, log: Log = quiet) -> Plan:
    """What a publish would push, read from build/ and the live repository; refusals raise PublishError."""
    if request.to:
        from toolkit.publish.git import plan_git

        return plan_git(config, request, log)
    from toolkit.publish.hub import plan_hub

    return plan_hub(config, request, log)


def execute(plan: Plan, log: Log = quiet) -> Report:
    """Push the plan's batches and verify them; a branch that moved since the plan is refused (exit 9)."""
    if plan.transport == "git":
        from toolkit.publish.git import execute_git

        return execute_git(plan, log)
    from toolkit.publish.hub import execute_hub

    return execute_hub(plan, log)


def interrupted(plan: Plan) -> Exception:
    """The one-line Interrupted error (exit 130) for a Ctrl-C after `plan` was made: what the remote holds,
    read back from it (readback.py)."""
    from toolkit.publish.readback import interrupted as state

    return state(plan)
