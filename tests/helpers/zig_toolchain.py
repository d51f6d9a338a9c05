"""A zig wrapper toolchain made at once for the tests (the build plans it with zig.plan_toolchain and makes it
with zig.materialize only when it executes)."""

from __future__ import annotations

from pathlib import Path

from toolkit.build.zig import LibStdCxx, ZigToolchain, materialize, plan_toolchain


def make_toolchain(
    zig: str, cpu: str, base: Path | None = None, gcc: str | None = None, std: LibStdCxx | None = None
) -> ZigToolchain:
    """plan_toolchain + materialize: the wrapper dir, made when missing."""
    return materialize(plan_toolchain(zig, cpu, base, gcc, std))
