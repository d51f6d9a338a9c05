"""The build stage end to end: load config and matrix -> detect the host -> plan -> execute -> report.

`prepare` is side-effect free apart from reading files and asking compilers for their versions; `build`
runs the local executor (and the nix one where nix exists). Commands, tests and benchmarks call these.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from toolkit import __version__
from toolkit.build.cache import BuildCache
from toolkit.build.envs import HostFacts, create_env, detect_host, discover_envs, plan_env, probe_nix, with_probe
from toolkit.build.inputs import load_project, read_provenance
from toolkit.build.local import LocalExecutor, RunStats, VariantResult
from toolkit.build.matrix import ENGINES, Matrix, Status, Variant, load_matrix, parse_name, status
from toolkit.build.plan import BuildPlan, make_plan
from toolkit.core.config import Config
from toolkit.core.errors import BuildError, ConfigError, NothingToBuildError  # noqa: F401  (re-exported)


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


TOOLCHAINS = ("auto", "zig", "system")


@dataclass(frozen=True)
class HostToolchain:
    """The C++ compiler/linker for bindings and links (and nvcc's host compiler) on this host."""

    kind: str  # zig | system
    cxx: str | None
    cxx_id: str  # identity hashed into every step's cache key
    ccbin: str | None = None  # nvcc -ccbin (None: nvcc's default host compiler)
    info: dict = field(default_factory=dict)  # exact versions, for each variant's provenance
    note: str = ""
    cross: dict = field(default_factory=dict)  # cpu -> (cxx, cxx_id, ccbin, info) of the zig cross toolchains


def resolve_toolchain(
    choice: str, host: HostFacts, *, provision_ok: bool = False, say=None, dry_run: bool = False
) -> HostToolchain:
    """--toolchain: `zig` = the pinned hermetic zig (provisioned when missing), `system` = CXX or g++,
    `auto` = zig for Linux when it is installed (or when provisioning is on), else the system compiler."""
    if choice not in TOOLCHAINS:
        raise ConfigError(f"--toolchain {choice!r} is not one of {', '.join(TOOLCHAINS)}", "use zig, system or auto")
    system = HostToolchain(
        "system", host.cxx, host.cxx_version, None, {"kind": "system", "cxx": host.cxx_version or str(host.cxx)}
    )
    if host.os != "linux" or choice == "system":
        return system
    from toolkit.build import zig as z

    found = z.find_zig()
    if found is None and choice == "auto" and not provision_ok:
        return replace(
            system,
            note=f"hermetic toolchain (zig {z.ZIG_VERSION}) not installed: building with the system compiler "
            f"({host.cxx_version or host.cxx}); `--provision` or `pip install {z.ZIG_PACKAGE}=={z.ZIG_VERSION}` "
            "makes manylinux_2_28-clean builds on any host",
        )
    if found is None and dry_run:  # plan it without installing anything
        sym = f"<zig {z.ZIG_VERSION} clang++ wrapper>"
        return HostToolchain(
            "zig",
            sym,
            f"zig {z.ZIG_VERSION} (to be provisioned)",
            sym,
            {"kind": "zig", "zig": z.ZIG_VERSION},
            f"zig {z.ZIG_VERSION} is not installed yet: the build provisions it ({z.ZIG_PACKAGE} from PyPI)",
        )
    zig = found or z.ensure_zig(say=say)
    tc = z.make_toolchain(zig, host.cpu)
    if tc.version != z.ZIG_VERSION:
        raise BuildError(
            f"zig at {zig} is version {tc.version}, not the pinned {z.ZIG_VERSION}",
            f"point GGML_VENDOR_ZIG at a ziglang {z.ZIG_VERSION} tree, or unset it",
        )
    cross = {}
    for cpu in host.cross_cpus:
        std = z.cross_libstdcxx(cpu)
        if std is not None:
            xt = z.make_toolchain(zig, cpu, std=std)
            cross[cpu] = (xt.cxx, xt.identity, xt.cxx, xt.provenance())
    return HostToolchain("zig", tc.cxx, tc.identity, tc.cxx, tc.provenance(), cross=cross)


@dataclass(frozen=True)
class Prepared:
    cfg: Config
    matrix: Matrix | None
    host: HostFacts
    plan: BuildPlan
    enabled: tuple[str, ...]
    cache: Path
    toolchain: HostToolchain | None = None
    notes: tuple[str, ...] = ()


def judge_one(v: Variant, host: HostFacts, enabled: tuple[str, ...], matrix: Matrix | None, engine: str) -> Status:
    """status() with the matrix's sources and this machine's pip configuration."""
    from toolkit.build.provision import constraint_excludes

    return status(
        v,
        host,
        enabled_backends=enabled,
        index=matrix.index_for(v) if matrix else "pip's default index",
        engine=engine,
        torch_source=matrix.torch_source(v) if matrix else None,
        toolkit_source=matrix.toolkit_source(v) if matrix else None,
        blocked=lambda src: constraint_excludes(src.name, src.version),
    )


def judge(
    variants: tuple[Variant, ...],
    host: HostFacts,
    enabled: tuple[str, ...],
    matrix: Matrix | None,
    probe_cache: Path | None,
    engine: str = "auto",
    *,
    store: bool = True,
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


def prepare(
    cfg: Config,
    *,
    all_variants: bool = False,
    patterns: tuple[str, ...] = (),
    host: HostFacts | None = None,
    create_envs: bool = False,
    engine: str = "auto",
    toolchain: str = "auto",
    provision: bool = False,
    say=None,
    dry_run: bool = False,
    read_only: bool = False,
) -> Prepared:
    """The build plan. `read_only` / `dry_run` (--dry-run) write and install nothing: the caches are read,
    never updated, and nothing is provisioned."""
    read_only = dry_run = read_only or dry_run
    cdir = cache_dir(cfg.root)
    host = host or detect_host()
    if engine not in ENGINES:
        raise ConfigError(f"--engine {engine!r} is not one of {', '.join(ENGINES)}", "use --engine local|nix|auto")
    if engine == "nix":
        check_nix(host)
    matrix, chosen = select_variants(cfg, all_variants=all_variants, patterns=patterns, host=host)
    project = load_project(cfg, memo=cdir / "validated-build-toml.json", tool_version=__version__, store=not read_only)
    enabled = tuple(b for b in cfg.backends if b in project.backends)
    if provision and not dry_run and matrix is not None and engine != "nix":
        host = provision_missing(chosen, host, enabled, matrix, say=say)
    if create_envs and matrix is not None:  # what [sources] did not provide, from the [torch-index] URLs
        host = _create_missing_envs(chosen, host, enabled, matrix)
    if toolchain == "system" or host.os != "linux":
        host = replace(host, cross_cpus=())  # cross builds need the zig toolchain
    judged = judge(chosen, host, enabled, matrix, cdir / "torch-envs.json", engine, store=not read_only)
    needs_cxx = any(st.buildable and st.executor == "local" for _, st in judged)
    tc = resolve_toolchain(toolchain, host, provision_ok=provision and needs_cxx, say=say, dry_run=dry_run)
    plan = make_plan(
        project,
        judged,
        cxx=tc.cxx,
        cxx_id=tc.cxx_id,
        gen_include=str(cdir / "gen"),
        ccbin=tc.ccbin,
        toolchain=tc.info,
        cross=tc.cross,
    )
    return Prepared(cfg, matrix, host, plan, enabled, cdir, tc, tuple(n for n in (tc.note,) if n))


def provision_missing(
    chosen: tuple[Variant, ...],
    host: HostFacts,
    enabled: tuple[str, ...],
    matrix: Matrix,
    *,
    say=None,
    envs_dir: Path | None = None,
    toolchains_dir: Path | None = None,
) -> HostFacts:
    """Install every torch build and toolkit that a selected variant lacks and the matrix's [sources] provide
    (each once, atomically, into the user cache), then re-detect. A package that cannot be installed stops
    the build with one line naming it, its version and the index; nothing half-made is left."""
    from toolkit.build.envs import default_envs_dir, detect_cuda_toolkits, detect_rocm_toolkits, provisioned_cudart
    from toolkit.build.provision import installs_for, provision

    envs_dir = envs_dir or default_envs_dir()
    done: set[Path] = set()
    for v in chosen:
        st = judge_one(v, host, enabled, matrix, "auto")
        for item in installs_for(v, st.provision, host.cpu, envs_dir, toolchains_dir):
            if item.path not in done:
                done.add(item.path)
                provision(item, say=say)
    if not done:
        return host
    return replace(
        host,
        toolkits=detect_cuda_toolkits(toolchains_dir) + detect_rocm_toolkits(),
        envs=discover_envs(envs_dir),
        cudart=provisioned_cudart(toolchains_dir),
    )


def _create_missing_envs(
    chosen: tuple[Variant, ...], host: HostFacts, enabled: tuple[str, ...], matrix: Matrix
) -> HostFacts:
    """Create the isolated torch environment of every selected variant that lacks only that."""
    for v in chosen:
        st = status(v, host, enabled_backends=enabled, index=matrix.index_for(v))
        if not st.buildable and st.reason.startswith("needs torch") and matrix.has_index(v):
            create_env(plan_env(v.torch, v.compute, matrix.index_for(v)))
    return replace(host, envs=discover_envs())


@dataclass
class BuildReport:
    results: list[VariantResult]
    stats: RunStats = field(default_factory=RunStats)
    plan: BuildPlan | None = None

    @property
    def failed(self) -> list[VariantResult]:
        return [r for r in self.results if r.result in ("failed", "interrupted")]

    def to_json(self) -> dict:
        return {
            "variants": [r.to_json() for r in self.results],
            "compiler_invocations": self.stats.compiler_invocations,
            "cache_hits": self.stats.cache_hits,
            "per_tool": self.stats.per_tool,
            "seconds": round(self.stats.seconds, 3),
            "ok": not self.failed,
        }


def execute(prep: Prepared, *, jobs: int | None = None, progress: bool = True) -> BuildReport:
    plan = prep.plan
    root = plan.project.root  # the package's rendered tree: step paths are relative to it
    cache = BuildCache(prep.cache, root)
    results: dict[str, VariantResult] = {}
    local = plan.buildable()
    stats = RunStats()
    if local:
        prov = read_provenance(prep.cfg.root)  # the project's pin and HEAD, whichever package
        ex = LocalExecutor(
            plan,
            cache,
            jobs=jobs or os.cpu_count() or 1,
            provenance=prov,
            log_dir=prep.cache / "logs",
            gen_dir=prep.cache / "gen",
            lock_sha=prov.lock_sha256 or "",
            progress=progress,
        )
        for r in ex.run(local):
            results[r.name] = r
        stats = ex.stats
    nix_variants = tuple(v for v in plan.variants if v.status.buildable and v.status.executor == "nix")
    if nix_variants:
        from toolkit.build.nix import NixExecutor

        for r in NixExecutor(plan, prep.host, jobs=jobs or 2, log_dir=prep.cache / "logs").run(nix_variants):
            results[r.name] = r
    skipped = [v for v in plan.variants if v.name not in results]
    if skipped:
        from toolkit.ci.workflow import engine_label  # deferred: only a report with skipped rows needs it

        for v in skipped:
            results[v.name] = VariantResult(
                v.name,
                "skipped",
                v.status.reason,
                v.out_dir,
                v.ops_id,
                v.archs,
                engine=engine_label(parse_name(v.name), prep.matrix),
            )
    return BuildReport([results[v.name] for v in plan.variants], stats, plan)
