"""What an executor reports, per variant and per run: the values the local and nix executors return and
the report prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit.build.stepcontext import Step


@dataclass
class VariantResult:
    name: str
    result: str  # built | up-to-date | skipped | failed | planned | interrupted
    reason: str = ""
    out_dir: str = ""
    id: str = ""
    archs: tuple[str, ...] = ()
    seconds: float = 0.0
    compiles: int = 0  # compiler invocations run for this variant (a shared one only for its first user)
    hits: int = 0
    log: str = ""
    failed_step: str = ""
    tail: str = ""
    engine: str = ""  # skipped here: who builds it instead (the generated workflow's runner)

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class RunStats:
    compiler_invocations: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    per_tool: dict[str, int] = field(default_factory=dict)


@dataclass
class StepResult:
    """One step's outcome in the local executor: its cache key and entry, hit or ran, its output."""

    step: Step
    key: str = ""
    entry: Path | None = None
    hit: bool = False
    ok: bool = True
    seconds: float = 0.0
    output: str = ""
    error: str = ""
