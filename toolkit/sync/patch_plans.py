"""The plans and reports of `ggml-vendor patch save | list | drop` (patch_workflow.py computes and carries
them out): what each verb would write, and what it did."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from toolkit.core.lock import VERDICT_UPSTREAM
from toolkit.sync.outcome import Succeeded

HEALTH_APPLIES = "applies"
HEALTH_UPSTREAM = VERDICT_UPSTREAM
HEALTH_CONFLICT = "conflicts"

MAX_NAME = 100  # NNNN-<name>.patch stays far below the 255 bytes a file name may have
NAME_RE = re.compile(r"^(?:(\d{4})-)?([A-Za-z0-9][A-Za-z0-9._-]*?)(?:\.patch)?$")


@dataclass(frozen=True)
class PatchHealth:
    name: str
    description: str
    sha256: str
    health: str  # HEALTH_APPLIES | HEALTH_UPSTREAM | HEALTH_CONFLICT
    detail: str = ""  # for a conflict: which hunk of which file

    def line(self) -> str:
        state = f"conflicts at {self.detail}" if self.health == HEALTH_CONFLICT else self.health
        return f"{self.name}: {state}" + (f" — {self.description}" if self.description else "")

    def to_json(self) -> dict[str, str]:
        return asdict(self)  # every field is a string: the JSON is the record itself


@dataclass(frozen=True)
class SaveResult(Succeeded):
    """`patch save`'s Report (stage protocol): the patch written, or with `written` false what a dry run
    would write."""

    name: str
    description: str
    refreshed: bool
    files: tuple[str, ...]
    added: int
    removed: int
    written: bool

    def lines(self) -> list[str]:
        verb = (
            ("refreshed" if self.refreshed else "saved")
            if self.written
            else ("would refresh" if self.refreshed else "would save")
        )
        head = (
            f"{verb} vendor/patches/{self.name}: {len(self.files)} file(s), +{self.added} -{self.removed}"
            f" — {self.description}"
        )
        return [head] + [f"  {f}" for f in self.files]

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "path": f"vendor/patches/{self.name}",
            "description": self.description,
            "refreshed": self.refreshed,
            "files": list(self.files),
            "lines_added": self.added,
            "lines_removed": self.removed,
            "written": self.written,
        }


@dataclass(frozen=True)
class SavePlan:
    """`patch save`'s Plan: the new vendor/ (series and lock included) and the report it makes."""

    root: Path
    desired: Mapping[str, bytes]
    result: SaveResult  # written=False

    def lines(self) -> list[str]:
        return self.result.lines()

    def to_json(self) -> dict[str, object]:
        return self.result.to_json()


@dataclass(frozen=True)
class ListReport(Succeeded):
    """`patch list`'s Report: each patch's health at `commit` (`rev`, or the pin when rev is None)."""

    rev: str | None
    commit: str
    health: tuple[PatchHealth, ...]

    def lines(self, verbose: bool = False) -> list[str]:
        where = f"{self.rev} ({self.commit[:12]})" if self.rev else f"the pin ({self.commit[:12]})"
        if not self.health:
            return [f"no patches in vendor/patches (checked at {where})"]
        bad = sum(h.health == HEALTH_CONFLICT for h in self.health)
        out = [f"{len(self.health)} patch(es) at {where}" + (f": {bad} conflict(s)" if bad else "")]
        for h in self.health:
            out.append(f"  {h.line()}")
            if verbose:
                out.append(f"    {h.to_json()}")
        return out

    def to_json(self) -> dict[str, object]:
        return {"rev": self.rev, "commit": self.commit, "patches": [h.to_json() for h in self.health]}


@dataclass(frozen=True)
class DropReport(Succeeded):
    """`patch drop`'s Report (and, with `written` false, its Plan's printout)."""

    dropped: str
    written: bool

    def lines(self) -> list[str]:
        return [f"{'dropped' if self.written else 'would drop'} vendor/patches/{self.dropped}"]

    def to_json(self) -> dict[str, object]:
        return {"dropped": self.dropped, "written": self.written}


@dataclass(frozen=True)
class DropPlan:
    root: Path
    desired: Mapping[str, bytes]
    dropped: str

    def lines(self) -> list[str]:
        return DropReport(self.dropped, False).lines()

    def to_json(self) -> dict[str, object]:
        return DropReport(self.dropped, False).to_json()
