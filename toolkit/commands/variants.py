"""`ggml-vendor variants`: the build matrix, each variant with its status on this machine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit import help as help_text
from toolkit.app import Options, Run, VariantOpt, command
from toolkit.core import ui
from toolkit.core.config import Config
from toolkit.core.stage import Log


def engine_for(v: Any, st: Any, nix_ok: bool, host_system: str, matrix: Any = None) -> str:
    from toolkit.build.engines import engine_label

    cross = v.system != host_system
    if st.buildable and st.executor == "local":
        return "local (cross-built; loading needs an arm64 runner)" if cross else "local"
    if st.provision:
        return "local, after provisioning" + (" (cross-built)" if cross else "")
    if nix_ok and v.system == host_system:
        return "nix (build --engine nix)"
    return engine_label(v, matrix)


@dataclass(frozen=True)
class Listing:
    """The matrix on this host (read-only: the plan is the result)."""

    matrix: str
    matrix_label: str
    host: str
    rows: tuple[dict[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"matrix": self.matrix, "host": self.host, "variants": list(self.rows)}


def _enabled_backends(cfg: Config) -> tuple[str, ...]:
    build_backends = None
    build_toml = cfg.package_root / "build.toml"
    if build_toml.is_file():
        import tomlkit

        build_backends = tomlkit.parse(build_toml.read_text()).unwrap().get("general", {}).get("backends")
    return tuple(b for b in cfg.backends if build_backends is None or b in build_backends)


def _row(v: Any, st: Any, engine: str, host_cpu: str) -> dict[str, Any]:
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


def _lister(patterns: list[str]) -> Any:
    def plan(cfg: Config, _log: Log) -> Listing:
        from toolkit.build.envs import detect_host, probe_nix  # deferred: keeps CLI start-up light
        from toolkit.build.matrix import load_matrix
        from toolkit.build.stage import judge_one

        matrix = load_matrix(cfg.variants_file)
        host = detect_host()
        enabled = _enabled_backends(cfg)
        nix_ok = host.nix is not None and probe_nix(host.nix).usable
        rows = []
        for v in matrix.select(patterns):
            st = judge_one(v, host, enabled, matrix, "auto")
            rows.append(_row(v, st, engine_for(v, st, nix_ok, host.system, matrix), host.cpu))
        label = matrix.path.relative_to(cfg.root) if matrix.path.is_relative_to(cfg.root) else matrix.path
        return Listing(str(matrix.path), str(label), host.system, tuple(rows))

    return plan


def _state(r: dict[str, Any]) -> tuple[str, str]:
    """A row's short status cell and the longer "with what / why not" text printed below the table."""
    if r["buildable"]:
        return f"buildable ({r['executor']})", ", ".join(x for x in (r["compiler"], r["torch_env"]) if x)
    if r["provision"]:
        return "provisionable", "installs " + ", ".join(r["provision"])
    return "elsewhere", r["reason"]


def _show(listing: Listing, opts: Options) -> None:
    from toolkit.build.report import table_lines, wrapped

    # Short cells in the table; the engine and the reason (long) below it, wrapped whole (a pipe or an
    # 80-column terminal must not cut them off).
    head = ("variant", "status", *(("torch / backend / toolkit / cpu / os",) if opts.verbose else ()))
    table, why = [head], []
    for r in listing.rows:
        state, what = _state(r)
        extra = (" / ".join(str(r[k] or "-") for k in ("torch", "backend", "toolkit", "cpu", "os")),)
        table.append((r["name"], state, *(extra if opts.verbose else ())))
        why += wrapped(f"  {r['name']}: ", f"{r['engine']}" + (f"; {what}" if what else ""))
    ui.out.print(f"{listing.matrix_label} on this host ({listing.host})")
    for line in [*table_lines(table), "engine, and why not / with what:", *why]:
        ui.out.print(line)
    n = sum(r["buildable"] for r in listing.rows)
    p = sum(bool(r["provision"]) for r in listing.rows)
    summary = (
        f"{n} of {len(listing.rows)} variants buildable here"
        + (f", {p} more after provisioning (`ggml-vendor build --all`)" if p else "")
        + "; the others name the engine that builds them."
    )
    for line in wrapped("", summary, ""):
        ui.out.print(line)


@command("variants", help=help_text.VARIANTS, dry_run=False, lock=False, packages=True)
def variants(opts: Options, variant: VariantOpt = []) -> Run[Listing, Listing]:  # noqa: B006
    return Run("reading the build matrix", plan=_lister(variant), show=_show)
