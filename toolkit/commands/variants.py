"""`ggml-vendor variants`: the build matrix, each variant with its status on this machine."""

from __future__ import annotations

from toolkit import help as help_text
from toolkit.app import JsonOpt, PackageOpt, ProjectOpt, VariantOpt, VerboseOpt, app, for_each_package, run_guarded
from toolkit.core import ui


def engine_for(v, st, nix_ok: bool, host_system: str, matrix=None) -> str:  # type: ignore[no-untyped-def]
    from toolkit.build.engines import engine_label

    cross = v.system != host_system
    if st.buildable and st.executor == "local":
        return "local (cross-built; loading needs an arm64 runner)" if cross else "local"
    if st.provision:
        return "local, after provisioning" + (" (cross-built)" if cross else "")
    if nix_ok and v.system == host_system:
        return "nix (build --engine nix)"
    return engine_label(v, matrix)


def _variants(cfg, patterns: list[str], as_json: bool, verbose: bool) -> None:  # type: ignore[no-untyped-def]
    from toolkit.build.envs import detect_host, probe_nix  # deferred: keeps CLI start-up light
    from toolkit.build.matrix import load_matrix
    from toolkit.build.provision import installs_for
    from toolkit.build.report import table_lines, wrapped
    from toolkit.build.stage import judge_one

    matrix = load_matrix(cfg.variants_file)
    host = detect_host()
    build_backends = None
    build_toml = cfg.package_root / "build.toml"
    if build_toml.is_file():
        import tomlkit

        build_backends = tomlkit.parse(build_toml.read_text()).unwrap().get("general", {}).get("backends")
    enabled = tuple(b for b in cfg.backends if build_backends is None or b in build_backends)
    nix_ok = bool(host.nix) and probe_nix(host.nix).usable
    rows = []
    for v in matrix.select(patterns):
        st = judge_one(v, host, enabled, matrix, "auto")
        rows.append(
            {
                "engine": engine_for(v, st, nix_ok, host.system, matrix),
                "name": v.name,
                "torch": v.torch,
                "backend": v.backend,
                "toolkit": v.toolkit,
                "cpu": v.cpu,
                "os": v.os,
                "buildable": st.buildable,
                "provision": [i.words for i in installs_for(v, st.provision, host.cpu)],
                "executor": st.executor,
                "reason": st.reason,
                "torch_env": st.env.python if st.env else None,
                "compiler": st.toolkit.compiler if st.toolkit else None,
            }
        )
    if as_json:
        ui.emit_json({"matrix": str(matrix.path), "host": host.system, "variants": rows})
        return
    title = matrix.path.relative_to(cfg.root) if matrix.path.is_relative_to(cfg.root) else matrix.path
    # Short cells in the table; the engine and the reason (long) below it, wrapped whole (a pipe or an
    # 80-column terminal must not cut them off).
    head = ("variant", "status", *(("torch / backend / toolkit / cpu / os",) if verbose else ()))
    table, why = [head], []
    for r in rows:
        if r["buildable"]:
            state, what = f"buildable ({r['executor']})", ", ".join(x for x in (r["compiler"], r["torch_env"]) if x)
        elif r["provision"]:
            state, what = "provisionable", "installs " + ", ".join(r["provision"])
        else:
            state, what = "elsewhere", r["reason"]
        extra = (" / ".join(str(r[k] or "-") for k in ("torch", "backend", "toolkit", "cpu", "os")),)
        table.append((r["name"], state, *(extra if verbose else ())))
        why += wrapped(f"  {r['name']}: ", f"{r['engine']}" + (f"; {what}" if what else ""))
    ui.out.print(f"{title} on this host ({host.system})")
    for line in [*table_lines(table), "engine, and why not / with what:", *why]:
        ui.out.print(line)
    n = sum(r["buildable"] for r in rows)
    p = sum(bool(r["provision"]) for r in rows)
    summary = (
        f"{n} of {len(rows)} variants buildable here"
        + (f", {p} more after provisioning (`ggml-vendor build --all`)" if p else "")
        + "; the others name the engine that builds them."
    )
    for line in wrapped("", summary, ""):
        ui.out.print(line)


@app.command("variants", help=help_text.VARIANTS)
def variants(
    project: ProjectOpt = None,
    package: PackageOpt = [],  # noqa: B006
    variant: VariantOpt = [],  # noqa: B006
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    run_guarded(
        for_each_package,
        project,
        package,
        lambda cfg: _variants(cfg, variant, json_, verbose),
        as_json=json_,
        verbose=verbose,
    )
