"""How the build judges one row of the matrix on this host: buildable here, provisionable, or built elsewhere
(host_status.status with the matrix's sources and this machine's pip configuration). Build's plan and the
variants listing (listing.py) both judge through it, so they never disagree."""

from __future__ import annotations

from toolkit.build.envs import HostFacts
from toolkit.build.host_status import Status, status
from toolkit.build.matrix import Matrix, Variant


def judge_one(v: Variant, host: HostFacts, enabled: tuple[str, ...], matrix: Matrix | None, engine: str) -> Status:
    """status() with the matrix's sources and this machine's pip configuration."""
    from toolkit.build.provision import source_blocked

    return status(
        v,
        host,
        enabled_backends=enabled,
        index=matrix.index_for(v) if matrix else "pip's default index",
        engine=engine,
        torch_source=matrix.torch_source(v) if matrix else None,
        toolkit_source=matrix.toolkit_source(v) if matrix else None,
        blocked=source_blocked,
    )
