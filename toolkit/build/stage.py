"""The build stage end to end, on the stage protocol (toolkit/core/stage.py):

    plan(config, request, log) -> BuildPlanned    pure: reads the project, the matrix and this host (asking
                                                  compilers their versions), decides every install and
                                                  compiler step; installs, writes and caches nothing
    execute(planned, log) -> BuildReport          runs what the plan lists: the provisioning steps first
                                                  (then plans again against the installed trees), the
                                                  caches, the local executor and the nix one

Policy lives here, not in the CLI: `--all` (and `--create-envs`) imply provisioning, and a plan with nothing
to build nor to provision is refused by execute (NothingToBuildError).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit import __version__
from toolkit.build.envs import HostFacts, detect_host, probe_nix
from toolkit.build.host_status import ENGINES, Status
from toolkit.build.inputs import load_project, read_provenance, remember_validated
from toolkit.build.judging import judge_one
from toolkit.build.matrix import Matrix, Variant, load_matrix
from toolkit.build.outdir import fingerprint, read_back
from toolkit.build.provision import Install, installs_for, provision
from toolkit.build.report import BuildReport, plan_lines
from toolkit.build.results import RunStats, VariantResult
from toolkit.build.steps import BuildPlan, make_plan
from toolkit.build.toolchain import HostToolchain, resolve_toolchain
from toolkit.build.torchenvs import EnvPlan, create_env, plan_env, remember_probe, with_probe
from toolkit.core.config import Config
from toolkit.core.errors import BuildError, ConfigError, Interrupted, NothingToBuildError
from toolkit.core.records import fields_json
from toolkit.core.stage import Log, quiet

if TYPE_CHECKING:
    from toolkit.build.local import LocalExecutor

__all__ = ["Request", "BuildPlanned", "BuildReport", "NothingToBuildError", "plan", "execute"]


@dataclass(frozen=True)
class Request:
    """What `ggml-vendor build` was asked for."""

    all_variants: bool = False  # every variant of the matrix (else the host's, or those matching `patterns`)
    patterns: tuple[str, ...] = ()  # globs over variant names
    create_envs: bool = False  # plan a venv for rows only a [torch-index] URL serves (implies provisioning)
    engine: str = "auto"  # auto | local | nix (nix only when asked for and usable)
    toolchain: str = "auto"  # auto | zig | system (host C++ compiler/linker and nvcc -ccbin)
    provision: bool | None = None  # install what rows lack from [sources]; None: on with --all / --create-envs
    jobs: int | None = None  # parallel compiler invocations (None: the CPU count)
    progress: bool = True  # a progress bar on a terminal while executing
    host: HostFacts | None = None  # the host's facts (None: detected; tests construct them)

    @property
    def provisioning(self) -> bool:
        return self.provision if self.provision is not None else (self.all_variants or self.create_envs)


def cache_dir(root: Path) -> Path:
    env = os.environ.get("GGML_VENDOR_BUILD_CACHE")
    return Path(env) if env else root / ".cache" / "build"


def check_nix(host: HostFacts) -> None:
    """--engine nix: refuse at once, in one line, when nix is absent or cannot run kernel-builder."""
    if not host.nix:
        raise BuildError("--engine nix: no `nix` on PATH", "install Nix >= 2.18 with flakes, or use --engine local")
    info = probe_nix(host.nix)
    if not info.usable:
        raise BuildError(f"--engine nix: {info.problem}", info.fix)


def host_variant(host: HostFacts) -> Variant:
    """The variant of the current interpreter's torch on this host (issue 3: "build for this environment")."""
    env = next((e for e in host.envs if not e.managed), None)
    if env is None:
        raise BuildError(
            "torch is not installed in this Python environment",
            "pip install -e '.[cuda]' (torch 2.14.1 CUDA 13.0), or use --all / --variant",
        )
    if env.cuda:
        major, minor = env.cuda.split(".")[:2]
        return Variant(env.torch_minor, "cuda", f"{major}.{minor}", host.cpu, host.os)
    if env.hip:
        major, minor = env.hip.split(".")[:2]
        return Variant(env.torch_minor, "rocm", f"{major}.{minor}", host.cpu, host.os)
    return Variant(env.torch_minor, "metal" if host.os == "darwin" else "cpu", None, host.cpu, host.os)


@dataclass(frozen=True)
class BuildPlanned:
    """The build plan as the stage protocol's Plan: what will be installed, created and compiled."""

    cfg: Config
    request: Request
    matrix: Matrix | None
    host: HostFacts
    plan: BuildPlan
    enabled: tuple[str, ...]
    cache: Path
    toolchain: HostToolchain | None = None
    notes: tuple[str, ...] = ()
    installs: tuple[Install, ...] = ()  # provisioning, run first (each once, atomically, into the user cache)
    envs: tuple[EnvPlan, ...] = ()  # --create-envs venvs (rows only a [torch-index] URL serves)
    # (variant, build/<variant>, its outdir.fingerprint when planned) of every buildable variant: what a
    # Ctrl-C's line compares build/ with
    before: tuple[tuple[str, Path, str | None], ...] = ()

    @property
    def preparing(self) -> bool:
        """Whether execute installs or creates anything before compiling (and then plans again)."""
        return bool(self.installs or self.envs)

    def lines(self) -> list[str]:
        return plan_lines(self)

    def to_json(self) -> dict[str, Any]:
        doc = self.plan.to_json()
        doc["provisioning"] = [fields_json(i, "what requirement index path", path=str) for i in self.installs]
        doc["create_envs"] = [{"path": str(e.path), "commands": [list(c) for c in e.commands]} for e in self.envs]
        return doc


Prepared = BuildPlanned  # the name older callers use


def judge(
    variants: tuple[Variant, ...],
    host: HostFacts,
    enabled: tuple[str, ...],
    matrix: Matrix | None,
    probe_cache: Path | None,
    engine: str = "auto",
    *,
    store: bool = False,
) -> list[tuple[Variant, Status]]:
    judged = []
    for v in variants:
        st = judge_one(v, host, enabled, matrix, engine)
        if st.buildable and st.env is not None and probe_cache is not None:
            st = replace(st, env=with_probe(st.env, probe_cache, store=store))
        judged.append((v, st))
    return judged


def select_variants(
    cfg: Config, *, all_variants: bool, patterns: tuple[str, ...], host: HostFacts
) -> tuple[Matrix | None, tuple[Variant, ...]]:
    if all_variants or patterns:
        matrix = load_matrix(cfg.variants_file)
        chosen = matrix.select(list(patterns))
        return matrix, chosen
    found = load_matrix(cfg.variants_file) if cfg.variants_file.is_file() else None
    return found, (host_variant(host),)


def planned_installs(judged: list[tuple[Variant, Status]], host: HostFacts) -> tuple[Install, ...]:
    """Every torch build and toolkit a selected variant lacks and the matrix's [sources] provide, each once."""
    seen: dict[Path, Install] = {}
    for v, st in judged:
        for item in installs_for(v, st.provision, host.cpu):
            seen.setdefault(item.path, item)
    return tuple(seen.values())


def planned_envs(judged: list[tuple[Variant, Status]], matrix: Matrix) -> tuple[EnvPlan, ...]:
    """The isolated torch environment of every selected variant that lacks only that, from [torch-index]."""
    seen: dict[Path, EnvPlan] = {}
    for v, st in judged:
        if not st.buildable and not st.provision and st.reason.startswith("needs torch") and matrix.has_index(v):
            env = plan_env(v.torch, v.compute, matrix.index_for(v))
            seen.setdefault(env.path, env)
    return tuple(seen.values())


def plan(cfg: Config, request: Request | None = None, log: Log = quiet) -> BuildPlanned:
    """The build plan (see the module docstring): pure."""
    request = request or Request()
    if request.engine not in ENGINES:
        raise ConfigError(
            f"--engine {request.engine!r} is not one of {', '.join(ENGINES)}", "use --engine local|nix|auto"
        )
    cdir = cache_dir(cfg.root)
    host = request.host or detect_host()
    if request.engine == "nix":
        check_nix(host)
    matrix, chosen = select_variants(cfg, all_variants=request.all_variants, patterns=request.patterns, host=host)
    project = load_project(cfg, memo=cdir / "validated-build-toml.json", tool_version=__version__, store=False)
    enabled = tuple(b for b in cfg.backends if b in project.backends)
    if request.toolchain == "system" or host.os != "linux":
        host = replace(host, cross_cpus=())  # cross builds need the zig toolchain
    judged = judge(chosen, host, enabled, matrix, cdir / "torch-envs.json", request.engine)
    local = request.engine != "nix" and matrix is not None
    installs = planned_installs(judged, host) if request.provisioning and local else ()
    envs = planned_envs(judged, matrix) if request.create_envs and local and matrix is not None else ()
    needs_cxx = bool(installs or envs) or any(st.buildable and st.executor == "local" for _, st in judged)
    tc = resolve_toolchain(request.toolchain, host, provision_ok=request.provisioning and needs_cxx)
    steps = make_plan(
        project,
        judged,
        cxx=tc.cxx,
        cxx_id=tc.cxx_id,
        gen_include=str(cdir / "gen"),
        ccbin=tc.ccbin,
        toolchain=tc.info,
        cross=tc.cross,
    )
    installs += (tc.install,) if tc.install is not None else ()
    log(f"planned {len(steps.variants)} variant(s), {len(installs)} install(s), {len(envs)} environment(s)")
    notes = tuple(n for n in (tc.note,) if n)
    outs = [(v.name, project.project_root / v.out_dir) for v in steps.variants if v.status.buildable]
    before = tuple((name, out, fingerprint(out)) for name, out in outs)
    return BuildPlanned(cfg, request, matrix, host, steps, enabled, cdir, tc, notes, installs, envs, before)


def _prepare(planned: BuildPlanned, log: Log) -> BuildPlanned:
    """Run the plan's provisioning and environment steps, then plan again against what they installed (the
    compile steps then name the installed trees instead of placeholders)."""
    for item in planned.installs:
        provision(item, say=log)
    for env in planned.envs:
        log(f"creating torch environment {env.path.name} …")
        create_env(env)
    again = replace(planned.request, provision=False, create_envs=False, host=None)
    return plan(planned.cfg, again, log)


def _remember(planned: BuildPlanned) -> None:
    """The caches the plan read but never wrote: build.toml's validation, the probed torch environments,
    and the zig wrapper dirs the plan computed."""
    from toolkit.build.zig import materialize

    remember_validated(planned.plan.project.root, planned.cache / "validated-build-toml.json")
    for v in planned.plan.buildable():
        if v.status.env is not None:
            remember_probe(v.status.env, planned.cache / "torch-envs.json")
    for wrapper in planned.toolchain.wrappers if planned.toolchain else ():
        materialize(wrapper)


def _refuse_nothing_to_build(planned: BuildPlanned) -> None:
    if any(v.status.buildable for v in planned.plan.variants):
        return
    reasons = "; ".join(f"{v.name}: {v.status.reason}" for v in planned.plan.variants[:3])
    raise NothingToBuildError(
        f"nothing to build on this host ({reasons})",
        "see `ggml-vendor variants`, or build where the toolchain exists",
    )


def execute(planned: BuildPlanned, log: Log = quiet) -> BuildReport:
    """Do what `planned` lists: provisioning (then plan again), the caches, the compiles, the report."""
    if planned.preparing:
        planned = _prepare(planned, log)
    _refuse_nothing_to_build(planned)
    _remember(planned)
    results: dict[str, VariantResult] = {}
    stats = RunStats()
    jobs = planned.request.jobs
    if planned.plan.buildable():
        ex = _local_executor(planned, jobs or os.cpu_count() or 1)
        for r in ex.run(planned.plan.buildable()):
            results[r.name] = r
        stats = ex.stats
    nix_variants = tuple(v for v in planned.plan.variants if v.status.buildable and v.status.executor == "nix")
    if nix_variants:
        from toolkit.build.nix import NixExecutor

        nix = NixExecutor(planned.plan, planned.host, jobs=jobs or 2, log_dir=planned.cache / "logs")
        for r in nix.run(nix_variants):
            results[r.name] = r
    _skipped(planned, results)
    return BuildReport(
        [results[v.name] for v in planned.plan.variants], stats, planned.plan, log_dir=str(planned.cache / "logs")
    )


def interrupted(planned: BuildPlanned) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C anywhere after `planned` was made, the report's printing
    included: which variants build/ holds anew, read back from disk (outdir.read_back)."""
    return read_back(planned.plan.project.root / "build", planned.before)


def _local_executor(planned: BuildPlanned, jobs: int) -> LocalExecutor:
    from toolkit.build.cache import BuildCache
    from toolkit.build.local import LocalExecutor  # deferred: the executor (and the Metal embed step, which
    # `python -m toolkit.build.metal` runs) is not loaded with the build package's face

    prov = read_provenance(planned.cfg.root)  # the project's pin and HEAD, whichever package
    return LocalExecutor(
        planned.plan,
        BuildCache(planned.cache, planned.plan.project.root),  # the package's rendered tree: steps are relative to it
        jobs=jobs,
        provenance=prov,
        log_dir=planned.cache / "logs",
        gen_dir=planned.cache / "gen",
        lock_sha=prov.lock_sha256 or "",
        progress=planned.request.progress,
    )


def _skipped(planned: BuildPlanned, results: dict[str, VariantResult]) -> None:
    """A result for every variant nobody built here, naming who builds it instead."""
    from toolkit.build.engines import engine_label

    for v in planned.plan.variants:
        if v.name not in results:
            results[v.name] = VariantResult(
                v.name,
                "skipped",
                v.status.reason,
                v.out_dir,
                v.ops_id,
                v.archs,
                engine=engine_label(v.variant, planned.matrix),
            )
