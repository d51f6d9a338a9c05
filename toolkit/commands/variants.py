"""`ggml-vendor variants`: the build matrix, each variant with its status on this machine."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from toolkit import help as help_text
from toolkit.app import JsonOpt, ProjectOpt, VariantOpt, VerboseOpt, app, run_guarded
from toolkit.core import ui
from toolkit.core.config import load


def _variants(project, patterns: list[str], as_json: bool, verbose: bool) -> None:  # type: ignore[no-untyped-def]
    from toolkit.build.envs import detect_host  # deferred: keeps CLI start-up light
    from toolkit.build.matrix import load_matrix, status

    cfg = load(project)
    matrix = load_matrix(cfg.variants_file)
    host = detect_host()
    build_backends = None
    if (cfg.root / "build.toml").is_file():
        import tomlkit

        build_backends = (
            tomlkit.parse((cfg.root / "build.toml").read_text()).unwrap().get("general", {}).get("backends")
        )
    enabled = tuple(b for b in cfg.backends if build_backends is None or b in build_backends)
    rows = []
    for v in matrix.select(patterns):
        st = status(v, host, enabled_backends=enabled, index=matrix.index_for(v))
        rows.append(
            {
                "name": v.name,
                "torch": v.torch,
                "backend": v.backend,
                "toolkit": v.toolkit,
                "cpu": v.cpu,
                "os": v.os,
                "buildable": st.buildable,
                "executor": st.executor,
                "reason": st.reason,
                "torch_env": st.env.python if st.env else None,
                "compiler": st.toolkit.compiler if st.toolkit else None,
            }
        )
    if as_json:
        ui.emit_json({"matrix": str(matrix.path), "host": host.system, "variants": rows})
        return
    table = Table(
        title=f"{matrix.path.relative_to(cfg.root) if matrix.path.is_relative_to(cfg.root) else matrix.path}"
        f" on this host ({host.system})"
    )
    table.add_column("variant", no_wrap=True)
    table.add_column("status")
    table.add_column("why not / with what")
    if verbose:
        table.add_column("torch / backend / toolkit / cpu / os")
    for r in rows:
        if r["buildable"]:
            how = ", ".join(x for x in (r["compiler"], r["torch_env"]) if x) or r["executor"]
            cells = [r["name"], f"[green]buildable ({r['executor']})[/]", escape(how)]
        else:
            cells = [r["name"], "[yellow]skipped[/]", escape(r["reason"])]
        if verbose:
            cells.append(" / ".join(str(r[k] or "-") for k in ("torch", "backend", "toolkit", "cpu", "os")))
        table.add_row(*cells)
    ui.out.print(table, markup=True)  # cells carry styles; dynamic text in them is escaped
    n = sum(r["buildable"] for r in rows)
    ui.out.print(f"{n} of {len(rows)} variants buildable here.")


@app.command("variants", help=help_text.VARIANTS)
def variants(
    project: ProjectOpt = None,
    variant: VariantOpt = [],  # noqa: B006
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    run_guarded(_variants, project, variant, json_, verbose, verbose=verbose)
