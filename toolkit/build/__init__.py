"""The build stage: the rendered project -> build/<variant>/ (metadata.json, <id>.abi3.so, Python package).

The stage protocol (the same in every stage package):
    plan(config, request) -> Plan     the host, the variants and their status, every compiler step (plan.py,
                                      pure); nothing is compiled or written (--create-envs aside)
    execute(plan) -> Report           run the steps: local.py on this host (cache.py: content-addressed
                                      objects), nix.py through kernel-builder
Beside them: matrix.py (the variants matrix), envs.py (toolkits and torch environments), inputs.py (the
rendered project read back), metal.py / metallib.py and rocm.py (backend specifics), stage.py (prepare/execute).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

# Imported before `plan` below is defined: the function, not the submodule, is `toolkit.build.plan` as an
# attribute (`from toolkit.build.plan import X` still reads the module). The stage itself is imported on
# first use, so `python -m toolkit.build.metal` and light helpers do not load the executors.
import toolkit.build.plan as _plan_module  # noqa: F401

if TYPE_CHECKING:
    from toolkit.build.stage import BuildReport, Prepared

__all__ = ["Request", "Plan", "Report", "plan", "execute"]
_TYPES = {"Plan": "Prepared", "Report": "BuildReport"}


def __getattr__(name: str) -> object:
    if name in _TYPES:
        from toolkit.build import stage

        return getattr(stage, _TYPES[name])
    raise AttributeError(name)


@dataclass(frozen=True)
class Request:
    all_variants: bool = False  # every variant of the matrix (else the host's, or those matching `patterns`)
    patterns: tuple[str, ...] = ()  # globs over variant names
    create_envs: bool = False  # create missing per-torch environments while planning (never under --dry-run)
    engine: str = "auto"  # auto | local | nix (nix only when asked for and usable)
    toolchain: str = "auto"  # auto | zig | system (host C++ compiler/linker and nvcc -ccbin)
    provision: bool = False  # install missing torch builds / toolkits / zig from the matrix's [sources]
    dry_run: bool = False  # plan only: read the caches, write and install nothing


def plan(config, request: Request | None = None, say=None) -> Prepared:
    from toolkit.build.stage import prepare

    request = request or Request()
    return prepare(
        config,
        all_variants=request.all_variants,
        patterns=request.patterns,
        create_envs=request.create_envs and not request.dry_run,
        engine=request.engine,
        toolchain=request.toolchain,
        provision=request.provision,
        say=say,
        dry_run=request.dry_run,
    )


def execute(plan: Prepared, *, jobs: int | None = None, progress: bool = True) -> BuildReport:
    from toolkit.build.stage import execute as run

    return run(plan, jobs=jobs, progress=progress)
