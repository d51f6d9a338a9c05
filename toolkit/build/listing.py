"""`ggml-vendor variants` as a view of the build stage: every row of the matrix judged exactly as build's plan
judges it (judging.judge_one: buildable here, provisionable, or which engine builds it elsewhere), as data the
command prints. Read-only: nothing is installed, probed into a cache or written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.build.envs import HostFacts, detect_host, probe_nix
from toolkit.build.host_status import Status
from toolkit.build.judging import judge_one
from toolkit.build.matrix import Matrix, Variant, load_matrix
from toolkit.core.config import Config


@dataclass(frozen=True)
class Listing:
    """The matrix on this host (read-only: the plan is the result)."""

    matrix: str
    matrix_label: str
    host: str
    rows: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"matrix": self.matrix, "host": self.host, "variants": list(self.rows)}


def engine_for(v: Variant, st: Status, nix_ok: bool, host_system: str, matrix: Matrix | None = None) -> str:
    """Who builds the row: this host (locally, perhaps after provisioning), nix, or the engine named elsewhere."""
    from toolkit.build.engines import engine_label

    cross = v.system != host_system
    if st.buildable and st.executor == "local":
        return "local (cross-built; loading needs an arm64 runner)" if cross else "local"
    if st.provision:
        return "local, after provisioning" + (" (cross-built)" if cross else "")
    if nix_ok and v.system == host_system:
        return "nix (build --engine nix)"
    return engine_label(v, matrix)


def enabled_backends(cfg: Config) -> tuple[str, ...]:
    """The configured backends that the rendered build.toml enables (all of them before the first render)."""
    build_backends = None
    build_toml = cfg.package_root / "build.toml"
    if build_toml.is_file():
        import tomlkit

        build_backends = tomlkit.parse(build_toml.read_text()).unwrap().get("general", {}).get("backends")
    return tuple(b for b in cfg.backends if build_backends is None or b in build_backends)


def _row(v: Variant, st: Status, engine: str, host_cpu: str) -> dict[str, Any]:
    from toolkit.build.provision import installs_for

    return {
        "engine": engine,
        "name": v.name,
        "torch": v.torch,
        "backend": v.backend,
        "toolkit": v.toolkit,
        "cpu": v.cpu,
        "os": v.os,
        "buildable": st.buildable,
        "provision": [i.words for i in installs_for(v, st.provision, host_cpu)],
        "executor": st.executor,
        "reason": st.reason,
        "torch_env": st.env.python if st.env else None,
        "compiler": st.toolkit.compiler if st.toolkit else None,
    }


def view(cfg: Config, patterns: tuple[str, ...], engine: str = "auto", host: HostFacts | None = None) -> Listing:
    """The rows `patterns` select (every row when none), each judged as build's plan would judge it under
    `engine` on `host` (detected when None)."""
    matrix = load_matrix(cfg.variants_file)
    host = host or detect_host()
    enabled = enabled_backends(cfg)
    nix_ok = host.nix is not None and probe_nix(host.nix).usable
    rows = []
    for v in matrix.select(list(patterns)):
        st = judge_one(v, host, enabled, matrix, engine)
        rows.append(_row(v, st, engine_for(v, st, nix_ok, host.system, matrix), host.cpu))
    label = matrix.path.relative_to(cfg.root) if matrix.path.is_relative_to(cfg.root) else matrix.path
    return Listing(str(matrix.path), str(label), host.system, tuple(rows))
