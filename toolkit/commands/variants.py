"""`ggml-vendor variants`: the build matrix, each variant with its status on this machine."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from toolkit.app import JsonOpt, ProjectOpt, app, run_guarded
from toolkit.core import ui
from toolkit.core.config import load


def _variants(project, patterns: list[str], as_json: bool) -> None:  # type: ignore[no-untyped-def]
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
    for r in rows:
        if r["buildable"]:
            how = ", ".join(x for x in (r["compiler"], r["torch_env"]) if x) or r["executor"]
            table.add_row(r["name"], f"[green]buildable ({r['executor']})[/]", escape(how))
        else:
            table.add_row(r["name"], "[yellow]skipped[/]", escape(r["reason"]))
    ui.out.print(table)
    n = sum(r["buildable"] for r in rows)
    ui.out.print(f"{n} of {len(rows)} variants buildable here.")


@app.command(
    "variants",
    help=(
        "List the build matrix (variants/*.toml): every variant name, and whether this machine can build it "
        "or exactly what it lacks (macOS + Metal toolchain, ROCm, an aarch64 host, torch X for CUDA Y from "
        "index Z)."
    ),
)
def variants(
    project: ProjectOpt = None,
    variant: Annotated[
        list[str], typer.Option("--variant", "-v", help="Only names matching this glob (repeatable).")
    ] = [],  # noqa: B006
    json_: JsonOpt = False,
) -> None:
    run_guarded(_variants, project, variant, json_)
