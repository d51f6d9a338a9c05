"""`ggml-vendor build`: the host variant, or the whole matrix (`--all`), in parallel and cached.

The module builds the stage's Request from the options; the runner prints the stage's own Plan/Report lines
(and the report's problems on stderr). Policy (what provisioning `--all` implies, refusing a host with
nothing to build) lives in the stage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from toolkit import help as help_text
from toolkit.app import Options, Run, VariantOpt, command, stage_run

if TYPE_CHECKING:
    from toolkit import build as build_stage

AllOpt = Annotated[bool, typer.Option("--all", help="Every variant of the matrix (variants/*.toml).")]
JobsOpt = Annotated[
    int | None, typer.Option("--jobs", "-j", min=1, help="Parallel compiler invocations (default: CPU count).")
]
CreateEnvsOpt = Annotated[
    bool,
    typer.Option(
        "--create-envs",
        help=(
            "Create missing per-torch-version environments: from the matrix's [sources] (implies "
            "--provision), then for other rows a venv with torch from the matrix's [torch-index] URL."
        ),
    ),
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help=(
            "Who builds: local (this host's toolchains), nix (kernel-builder via Nix >= 2.18 with "
            "nix-command and flakes enabled; every variant of this host's system), auto (default: local)."
        ),
    ),
]
ToolchainOpt = Annotated[
    str,
    typer.Option(
        "--toolchain",
        help=(
            "Host C++ compiler/linker for Linux variants (and nvcc's -ccbin): zig (the pinned ziglang "
            "0.14.1 targeting glibc 2.28: manylinux_2_28-clean on any host; provisioned when missing), "
            "system (CXX or g++), auto (default: zig when installed or provisioning, else system)."
        ),
    ),
]
ProvisionOpt = Annotated[
    bool | None,
    typer.Option(
        "--provision/--no-provision",
        help=(
            "Install what selected variants lack and the matrix's [sources] provide — a torch build per "
            "torch version, a CUDA toolkit per version (PyPI cuda-toolkit), the pinned zig — into the user "
            "cache (atomically; reused by later runs). Default: on with --all."
        ),
    ),
]


@command("build", help=help_text.BUILD, packages=True)
def build(
    opts: Options,
    all_variants: AllOpt = False,
    variant: VariantOpt = [],  # noqa: B006
    jobs: JobsOpt = None,
    create_envs: CreateEnvsOpt = False,
    engine: EngineOpt = "auto",
    toolchain: ToolchainOpt = "auto",
    provision: ProvisionOpt = None,
) -> Run[build_stage.Plan, build_stage.Report]:
    from toolkit import build as build_stage

    request = build_stage.Request(
        all_variants,
        tuple(variant),
        create_envs=create_envs,
        engine=engine,
        toolchain=toolchain,
        provision=provision,  # None: the stage's policy (on with --all / --create-envs)
        jobs=jobs,
        progress=not opts.json,
    )
    # The stage's own plan and execute, its Plan/Report lines printed by the runner (app.py): this module
    # is the request builder, and the build reads one way from here to the compiler (docs/architecture.md).
    return stage_run(
        "planning the build",
        build_stage,
        request,
        live=True,
        spinner=False,
        announce=True,
        interrupted=build_stage.interrupted,
    )
