"""The build stage: the rendered project -> build/<variant>/ (metadata.json, <id>.abi3.so, Python package).

The stage protocol (toolkit/core/stage.py, the same in every stage package):
    plan(config, request, log) -> Plan     the host, the variants and their status, the installs and every
                                           compiler step (stage.py + plan.py); pure
    execute(plan, log) -> Report           provisioning first, then the steps: local.py on this host
                                           (cache.py: content-addressed objects), nix.py through kernel-builder
Beside them: matrix.py (the variants matrix), envs.py (toolkits and torch environments), provision.py and
zig.py (what is installed on demand), inputs.py (the rendered project read back), report.py (what is
printed), metallib.py and rocm.py (backend specifics), engines.py (who builds a row this host cannot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# Imported before `plan` below is defined: the function, not the submodule, is `toolkit.build.plan` as an
# attribute (`from toolkit.build.plan import X` still reads the module). The stage itself is imported on
# first use, so light helpers do not load the executors.
import toolkit.build.plan as _plan_module  # noqa: F401

if TYPE_CHECKING:
    from toolkit.build.report import BuildReport
    from toolkit.build.stage import BuildPlanned, Request
    from toolkit.core.config import Config
    from toolkit.core.stage import Log

__all__ = ["Request", "Plan", "Report", "plan", "execute", "interrupted"]
_TYPES = {"Plan": "BuildPlanned", "Report": "BuildReport", "Request": "Request"}


def __getattr__(name: str) -> object:
    if name in _TYPES:
        from toolkit.build import stage

        return getattr(stage, _TYPES[name])
    raise AttributeError(name)


def plan(config: Config, request: Request | None = None, log: Log | None = None) -> BuildPlanned:
    from toolkit.build.stage import plan as make
    from toolkit.core.stage import quiet

    return make(config, request, log or quiet)


def execute(plan: BuildPlanned, log: Log | None = None) -> BuildReport:
    from toolkit.build.stage import execute as run
    from toolkit.core.stage import quiet

    return run(plan, log or quiet)


def interrupted(plan: BuildPlanned) -> Exception:
    """The one-line Interrupted error (exit 130) for a Ctrl-C after `plan` was made: which variants build/
    holds anew, read back from disk."""
    from toolkit.build.stage import interrupted as state

    return state(plan)
