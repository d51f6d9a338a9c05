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
from toolkit.build.envs import HostFacts, create_env, detect_host, discover_envs, plan_env, with_probe
from toolkit.build.inputs import load_project, read_provenance
from toolkit.build.local import LocalExecutor, RunStats, VariantResult
from toolkit.build.matrix import Matrix, Status, Variant, load_matrix, status
from toolkit.build.plan import BuildPlan, make_plan
from toolkit.core.config import Config
from toolkit.core.errors import BuildError


class NothingToBuildError(BuildError):
    """None of the selected variants can be built on this host."""

    exit_code = 10


def cache_dir(root: Path) -> Path:
    env = os.environ.get("GGML_VENDOR_BUILD_CACHE")
    return Path(env) if env else root / ".cache" / "build"


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
class Prepared:
    cfg: Config
    matrix: Matrix | None
    host: HostFacts
    plan: BuildPlan
    enabled: tuple[str, ...]
    cache: Path


def judge(
    variants: tuple[Variant, ...],
    host: HostFacts,
    enabled: tuple[str, ...],
    matrix: Matrix | None,
    probe_cache: Path | None,
    *,
    store: bool = True,
) -> list[tuple[Variant, Status]]:
    judged = []
    for v in variants:
        index = matrix.index_for(v) if matrix else None  # no matrix file: pip's default index
        st = status(v, host, enabled_backends=enabled, index=index)
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
    matrix = load_matrix(cfg.variants_file) if cfg.variants_file.is_file() else None
    return matrix, (host_variant(host),)


def prepare(
    cfg: Config,
    *,
    all_variants: bool = False,
    patterns: tuple[str, ...] = (),
    host: HostFacts | None = None,
    create_envs: bool = False,
    read_only: bool = False,
) -> Prepared:
    """The build plan. `read_only` (--dry-run) writes nothing: the caches are read, never updated."""
    cdir = cache_dir(cfg.root)
    host = host or detect_host()
    matrix, chosen = select_variants(cfg, all_variants=all_variants, patterns=patterns, host=host)
    project = load_project(cfg, memo=cdir / "validated-build-toml.json", tool_version=__version__, store=not read_only)
    enabled = tuple(b for b in cfg.backends if b in project.backends)
    if create_envs and matrix is not None:
        host = _create_missing_envs(chosen, host, enabled, matrix)
    judged = judge(chosen, host, enabled, matrix, cdir / "torch-envs.json", store=not read_only)
    plan = make_plan(project, judged, cxx=host.cxx, cxx_id=host.cxx_version, gen_include=str(cdir / "gen"))
    return Prepared(cfg, matrix, host, plan, enabled, cdir)


def _create_missing_envs(
    chosen: tuple[Variant, ...], host: HostFacts, enabled: tuple[str, ...], matrix: Matrix
) -> HostFacts:
    """Create the isolated torch environment of every selected variant that lacks only that."""
    for v in chosen:
        st = status(v, host, enabled_backends=enabled, index=matrix.index_for(v))
        if not st.buildable and st.reason.startswith("needs torch"):
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
    root = prep.cfg.root
    cache = BuildCache(prep.cache, root)
    results: dict[str, VariantResult] = {}
    local = plan.buildable()
    stats = RunStats()
    if local:
        prov = read_provenance(root)
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

        for r in NixExecutor(plan, prep.host, jobs=jobs or 2).run(nix_variants):
            results[r.name] = r
    for v in plan.variants:
        if v.name not in results:
            results[v.name] = VariantResult(v.name, "skipped", v.status.reason, v.out_dir, v.ops_id, v.archs)
    return BuildReport([results[v.name] for v in plan.variants], stats, plan)
