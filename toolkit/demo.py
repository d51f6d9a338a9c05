"""`ggml-vendor demo`: the whole pipeline on the embedded miniature upstream, offline, in a throwaway
workspace — sync, render, build what this machine can, verify, publish to a local Hub, load it back with
`kernels.get_kernel` in a fresh process — and one report of the run.

A project of several packages: one sync (the union), then render → get_kernel for each package in turn (the
first package's stages keep their plain names, a later package's are named "<stage> <package>"). A later
package whose entry files the embedded miniature does not hold is left out of the workspace and reported as
one visibly skipped stage naming the missing files (the run stays green)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.core.config import Config
from toolkit.core.config import load as load_config
from toolkit.core.errors import VendorError

DEMO_REPO = "ggml-demo/ggml-attn-kernels"
DEMO_TOKEN = "hf_demo_local_only"
# What the workspace copies from the project: its configuration and templates, never vendor/ or build/.
COPIED = ("pyproject.toml", "variants", "templates")

OK, FAILED, SKIPPED = "ok", "failed", "skipped"


@dataclass
class Stage:
    name: str
    status: str = SKIPPED
    seconds: float = 0.0
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.name,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "detail": self.detail,
            "data": self.data,
        }


@dataclass
class DemoReport:
    workspace: str
    stages: list[Stage]

    @property
    def ok(self) -> bool:
        """No stage failed (a stage is only skipped after a failure, or deliberately with its reason: a package
        the miniature cannot serve)."""
        return bool(self.stages) and not any(s.status == FAILED for s in self.stages)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "workspace": self.workspace,
            "tool_version": __version__,
            "stages": [s.to_json() for s in self.stages],
        }


def _source_project(start: Path | None) -> Path:
    """The project whose configuration the demo copies: --project, else the nearest one, else the tool's own
    repository (a source checkout installed with pip -e)."""
    from toolkit.core.config import find_root

    try:
        return find_root(start)
    except VendorError:
        here = Path(__file__).resolve().parents[1]
        if (here / "pyproject.toml").is_file() and (here / "templates").is_dir():
            return here
        raise


def make_workspace(source: Path, dest: Path, upstream: str | None = None) -> Path:
    """A copy of the project's configuration pointing at the embedded miniature upstream (or `upstream`)."""
    from toolkit.core.config import set_value
    from toolkit.sync.embedded import EMBEDDED

    dest.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, dest / name, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dest / name)
    # Patches target the real upstream; the miniature is our own code and needs none.
    (dest / "vendor" / "patches").mkdir(parents=True, exist_ok=True)
    set_value(dest, "upstream", upstream or EMBEDDED)
    set_value(dest, "hub-repo", DEMO_REPO)
    _later_packages_for_demo(dest, embedded=upstream is None)
    return dest


def demo_repo(package: str, first: bool) -> str:
    return DEMO_REPO if first else f"ggml-demo/{package}"


def missing_in_miniature(pkg: Any) -> list[str]:
    """The package's entry files (no alternative present) that the embedded miniature does not hold."""
    from toolkit.sync.embedded import mini_files

    have = set(mini_files())
    return [
        str(entry)
        for op in pkg.ops
        for entries in op.entries.values()
        for entry in entries
        if not any(alt in have for alt in entry.alternatives)
    ]


def _later_packages_for_demo(dest: Path, *, embedded: bool) -> None:
    """Point each later package at its demo Hub repo; on the miniature, drop those it cannot serve."""
    import tomlkit

    from toolkit.core import fs
    from toolkit.core.config import TABLE, parse_toml

    cfg = load_config(dest)
    doc = parse_toml(dest / "pyproject.toml")
    tables = doc["tool"][TABLE].get("packages", {})
    for pkg in cfg.packages[1:]:
        if embedded and missing_in_miniature(pkg):
            del tables[pkg.name]
        else:
            tables[pkg.name]["hub-repo"] = demo_repo(pkg.name, first=False)
    fs.atomic_write(dest / "pyproject.toml", tomlkit.dumps(doc).encode("utf-8"))


def _stage(report: DemoReport, name: str, say: Callable[[str], None], fn: Callable[[], tuple[Any, str, dict]]) -> Any:
    """Run one demo stage: `fn` returns (result, detail, data). A failure is recorded (the table shows it, not a
    traceback) and every later stage is skipped; returns the result, or None when failed or skipped."""
    st = Stage(name)
    report.stages.append(st)
    if any(s.status == FAILED for s in report.stages[:-1]):
        st.detail = "not run: an earlier stage failed"
        return None
    say(f"{name} …")
    t0 = time.perf_counter()
    result = None
    try:
        result, st.detail, st.data = fn()
        st.status = OK
    except VendorError as exc:
        st.status, st.detail = FAILED, exc.one_line()
    except Exception as exc:  # a demo reports every failure in its table instead of a traceback
        st.status, st.detail = FAILED, f"{type(exc).__name__}: {exc}"
    st.seconds = time.perf_counter() - t0
    return result


_LOAD_CHILD = r"""
import json, math, sys
import torch, kernels
repo, version = sys.argv[1], int(sys.argv[2])
mod = kernels.get_kernel(repo, version=version, trust_remote_code=True)
names = list(getattr(mod, "__all__", []))
ops = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith(mod.__name__ + "::"))
out = {"module": mod.__name__, "functions": names, "ops": ops, "file": getattr(mod, "__file__", ""),
       "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "ran": []}


def rel(x, ref):
    return float((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


if torch.cuda.is_available():
    gen = torch.Generator(device="cuda").manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=gen)
    if hasattr(mod, "gated_delta_net"):
        D = next((d for d in (128, 64, 32, 16) if mod.supports_gated_delta_net(d)), None)
        B, T, H = 2, 5, 4
        q = torch.nn.functional.normalize(rnd(B, T, H, D), dim=-1)
        k = torch.nn.functional.normalize(rnd(B, T, H, D), dim=-1)
        v, g = rnd(B, T, H, D), -0.5 * torch.rand(B, T, H, device="cuda", generator=gen)
        beta, s0 = torch.sigmoid(rnd(B, T, H)), 0.1 * rnd(B, H, D, D)
        o, s1 = mod.gated_delta_net(q, k, v, g, beta, s0.clone())
        # float64 reference: ggml's recurrence, [value][key] state, output scaled by 1/sqrt(D)
        s, ref = s0.double(), torch.empty(B, T, H, D, dtype=torch.float64, device="cuda")
        for t in range(T):
            qt, kt, vt = q[:, t].double(), k[:, t].double(), v[:, t].double()
            gt = g[:, t].double().exp()[..., None]
            kv = (s * kt[:, :, None, :]).sum(-1)
            delta = (vt - gt * kv) * beta[:, t].double()[..., None]
            s = gt[..., None] * s + delta[..., None] * kt[:, :, None, :]
            ref[:, t] = (s * qt[:, :, None, :]).sum(-1) / math.sqrt(D)
        err = max(rel(o, ref), rel(s1, s))
        out["ran"].append({"op": "gated_delta_net", "shape": [B, T, H, D], "rel_err": err, "ok": err < 2e-3})
    if hasattr(mod, "flash_attn"):
        D = next((d for d in (128, 64, 256) if mod.supports_flash_attn(1, d, d)), None)
        B, H, HKV, NQ, NKV = 1, 8, 2, 1, 300
        q, k, v = rnd(B, H, NQ, D), rnd(B, HKV, NKV, D).half(), rnd(B, HKV, NKV, D).half()
        o = mod.flash_attn(q, k, v)
        kk, vv = (t.double().repeat_interleave(H // HKV, dim=1) for t in (k, v))
        p = torch.softmax((q.double() @ kk.transpose(-1, -2)) / math.sqrt(D), dim=-1)
        ref = (p @ vv).transpose(1, 2)
        err = rel(o, ref)
        out["ran"].append({"op": "flash_attn", "shape": [B, H, HKV, NQ, NKV, D], "rel_err": err, "ok": err < 2e-2})
    torch.cuda.synchronize()
print("DEMO" + json.dumps(out))
"""


def load_with_get_kernel(endpoint: str, repo: str, version: int, cache: Path) -> dict[str, Any]:
    """kernels.get_kernel(repo, version=N, trust_remote_code=True) in a fresh process against `endpoint`."""
    from toolkit.testing.localhub import client_env

    env = client_env(endpoint, cache)
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_CHILD, repo, str(version)], env=env, capture_output=True, text=True, timeout=600
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DEMO")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise VendorError(f"get_kernel failed in a fresh process: {tail}", "see the traceback by running it by hand")
    return json.loads(line[4:])


# --- the stages: each one stage's plan + execute, returning (result, detail, data) ----------------------


def _setup(source: Path, ws: Path, upstream: str | None) -> tuple[Config, str, dict]:
    make_workspace(source, ws, upstream)
    cfg = load_config(ws)
    detail = f"copied {', '.join(COPIED)} from {source} into {ws}; upstream = {upstream or 'embedded miniature'}"
    if len(cfg.packages) > 1:
        detail += f"; packages: {', '.join(cfg.package_names())}"
    return cfg, detail, {"packages": list(cfg.package_names())}


def _skipped_packages(source: Path, cfg: Config | None) -> list[Stage]:
    """One deliberately skipped stage per package of the project that the workspace left out."""
    if cfg is None:
        return []
    kept = set(cfg.package_names())
    return [
        Stage(
            pkg.name,
            SKIPPED,
            detail=f"skipped: its entry files {', '.join(missing_in_miniature(pkg))} are not in the embedded "
            "miniature upstream (run the demo with --upstream PATH to a ggml clone to include it)",
        )
        for pkg in load_config(source).packages
        if pkg.name not in kept
    ]


def _sync(cfg: Config, upstream: str | None, rev: str | None) -> tuple[Config, str, dict]:
    from toolkit import sync
    from toolkit.sync.embedded import EMBEDDED, TAG

    request = sync.Request(rev=rev or (TAG if upstream is None else "HEAD"), upstream=upstream or EMBEDDED)
    rep = sync.execute(sync.plan(cfg, request))
    lock = rep.plan.lock
    detail = f"{rep.status}: {len(lock.files)} files at {lock.commit[:12]} ({lock.layout} layout)"
    return load_config(cfg.root), detail, {"commit": lock.commit, "files": sorted(lock.files)}


def _render(cfg: Config) -> tuple[None, str, dict]:
    from toolkit import render

    files = [f.path for f in render.execute(render.plan(cfg)).plan.files]
    return None, f"{len(files)} files (build.toml validated by kernels' parser)", {"files": files}


def _build(cfg: Config, jobs: int | None, engine: str = "auto", toolchain: str = "auto") -> tuple[list[str], str, dict]:
    from toolkit import build

    rep = build.execute(build.plan(cfg, build.Request(engine=engine, toolchain=toolchain, jobs=jobs, progress=False)))
    built = [r.name for r in rep.results if r.result in ("built", "up-to-date")]
    skipped = [r for r in rep.results if r.result == "skipped"]
    if rep.failed:
        f = rep.failed[0]
        last = (f.tail or "").strip().splitlines()[-1:]
        raise VendorError(
            f"{f.name} failed at {f.failed_step or f.reason or 'an unnamed step'}" + (f": {last[0]}" if last else ""),
            f"full log: {f.log}" if f.log else "re-run `ggml-vendor build -C <workspace>` to see the error",
        )
    if not built:
        raise VendorError(
            "this machine can build no variant: " + "; ".join(f"{r.name}: {r.reason}" for r in skipped),
            "install a CUDA toolkit matching torch (see ggml-vendor variants)",
        )
    detail = (
        f"built {', '.join(built)} ({rep.stats.compiler_invocations} compiler runs); "
        f"{len(skipped)} other variants skipped here"
    )
    return built, detail, rep.to_json()


def _verify(cfg: Config, variants: list[str]) -> tuple[None, str, dict]:
    from toolkit import verify

    # A host-toolchain build may exceed manylinux_2_28 (e.g. glibc 2.32+ symbols from a newer libstdc++):
    # reported as a warning here; publishing such a build to huggingface.co is still refused.
    request = verify.Request(tuple(variants), verify.VerifyOptions(host_toolchain_ok=True))
    rep = verify.execute(verify.plan(cfg, request))
    if not rep.ok:
        f = rep.failures()[0]
        raise VendorError(
            f"{len(rep.failures())} check(s) failed; first: {f.variant}: {f.check}: {f.message}",
            f.remedy or "run ggml-vendor verify -C <workspace>",
        )
    n = sum(len(v.findings) for v in rep.variants)
    warns = [f"{f.check}: {f.message}" for v in rep.variants for f in v.findings if f.status == "warn"]
    detail = f"{len(rep.variants)} variant(s), {n} findings, none failing (smoke: get_local_kernel import)" + (
        f"; warnings: {'; '.join(warns)[:400]}" if warns else ""
    )
    return None, detail, rep.to_json()


def _publish(cfg: Config, variants: list[str], endpoint: str, say: Callable[[str], None]) -> tuple[None, str, dict]:
    from toolkit import publish

    request = publish.Request(tuple(variants), endpoint=endpoint, token=DEMO_TOKEN)
    res = publish.execute(publish.plan(cfg, request, say), say)
    detail = (
        f"{res.target} branch v{cfg.version}: {len(res.commits)} commits, "
        f"{res.verified['files_checked']} files re-listed and matched"
    )
    return None, detail, res.to_json()


def _get_kernel(cfg: Config, endpoint: str) -> tuple[None, str, dict]:
    repo = demo_repo(cfg.name, cfg.is_first)
    info = load_with_get_kernel(endpoint, repo, cfg.version, cfg.root / "hf-cache")
    ran = "; ".join(f"{r['op']} on {info['device']}: max rel err {r['rel_err']:.1e} vs float64" for r in info["ran"])
    if any(not r["ok"] for r in info["ran"]):
        raise VendorError(f"the loaded kernel disagrees with the float64 reference: {ran}", "run the GPU tests")
    detail = (
        f"get_kernel({repo!r}, version={cfg.version}) -> {info['module']}: "
        f"{len(info['functions'])} functions, {len(info['ops'])} ops"
        + (f"; {ran}" if ran else "; no GPU here: not executed")
    )
    return None, detail, info


STAGES = ("setup", "sync", "render", "build", "verify", "publish", "get_kernel")


def run_demo(
    project: Path | None = None,
    *,
    workspace: Path | None = None,
    jobs: int | None = None,
    say: Callable[[str], None] | None = None,
    upstream: str | None = None,
    rev: str | None = None,
    engine: str = "auto",
    toolchain: str = "auto",
) -> DemoReport:
    """The pipeline in a fresh workspace, stage by stage. `upstream`/`rev` replace the embedded miniature
    with a real ggml or llama.cpp (a local clone or URL); `engine`/`toolchain` are `build`'s options."""
    from toolkit.testing.localhub import HubServer, HubState

    say = say or (lambda _m: None)
    source = _source_project(project)
    ws = workspace or Path(tempfile.mkdtemp(prefix="ggml-vendor-demo-"))
    report = DemoReport(str(ws), [])
    cfg = _stage(report, "setup", say, lambda: _setup(source, ws, upstream))
    report.stages += _skipped_packages(source, cfg)
    cfg = _stage(report, "sync", say, lambda: _sync(cfg, upstream, rev))
    views = cfg.selected(()) if cfg is not None else (None,)
    with HubServer(HubState(tokens=(DEMO_TOKEN,))) as hub:
        for view in views:
            _package_stages(report, say, view, hub.url, jobs, engine, toolchain)
    return report


def _package_stages(
    report: DemoReport,
    say: Callable[[str], None],
    cfg: Any,
    endpoint: str,
    jobs: int | None,
    engine: str,
    toolchain: str,
) -> None:
    """render -> get_kernel for one package (names suffixed with the package for a later one)."""
    suffix = "" if cfg is None or cfg.is_first else f" {cfg.name}"
    _stage(report, "render" + suffix, say, lambda: _render(cfg))
    built = _stage(report, "build" + suffix, say, lambda: _build(cfg, jobs, engine, toolchain))
    _stage(report, "verify" + suffix, say, lambda: _verify(cfg, built))
    _stage(report, "publish" + suffix, say, lambda: _publish(cfg, built, endpoint, say))
    _stage(report, "get_kernel" + suffix, say, lambda: _get_kernel(cfg, endpoint))
