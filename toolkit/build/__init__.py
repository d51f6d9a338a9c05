"""The build stage: the rendered project -> build/<variant>/ (metadata.json, <id>.abi3.so, Python package).

The stage protocol (toolkit/core/stage.py, the same in every stage package):
    plan(config, request, log) -> Plan     the host, the variants and their status, the installs and every
                                           compiler step (stage.py + steps.py); pure
    execute(plan, log) -> Report           provisioning first, then the steps: local.py on this host
                                           (cache.py: content-addressed objects), nix.py through kernel-builder
Beside them: matrix.py (the variants matrix), envs.py (toolkits and torch environments), provision.py and
zig.py (what is installed on demand), inputs.py (the rendered project read back), report.py (what is
printed), metallib.py and rocm.py (backend specifics), engines.py (who builds a row this host cannot), listing.py (`view`: the matrix
judged as the plan judges it, what `ggml-vendor variants` prints).
"""

from __future__ import annotations

from toolkit.build import listing, stage
from toolkit.build.listing import Listing
from toolkit.build.report import BuildReport as Report
from toolkit.build.stage import BuildPlanned as Plan
from toolkit.build.stage import Request
from toolkit.core.config import Config
from toolkit.core.stage import Log, quiet

__all__ = ["Request", "Plan", "Report", "plan", "execute", "interrupted", "view", "Listing"]


def plan(config: Config, request: Request | None = None, log: Log = quiet) -> Plan:
    """The host, the variants and their status, the installs and every compiler step; pure."""
    return stage.plan(config, request, log)


def execute(plan: Plan, log: Log = quiet) -> Report:
    """Provisioning first, then the plan's steps."""
    return stage.execute(plan, log)


def view(config: Config, request: Request) -> Listing:
    """`ggml-vendor variants`: the rows `request.patterns` select, judged as `plan` judges them (read-only)."""
    return listing.view(config, request.patterns, request.engine, request.host)


def interrupted(plan: Plan) -> Exception:
    """The one-line Interrupted error (exit 130) for a Ctrl-C after `plan` was made: which variants build/
    holds anew, read back from disk."""
    return stage.interrupted(plan)
