"""`ggml-vendor outdated`: what moved since the pin, read only.

    plan(config, request, log) -> Plan     what will be read (the upstream and its head, the index, the matrix,
                                           the declared client ranges); reads local files only
    execute(plan, log) -> Report           reads the upstream and the index, writes nothing in the project; the
                                           Report fails with `Outdated` (exit 12) when something moved

Four sections, per package: upstream (commits since the pin touching the package's closure, with dates, and
which ops' fingerprints or bodies would change: sync's drift report), patches (each patch of the series at the
head: applies, rebased by a three-way apply, already upstream, or conflicts at a named hunk), torch (index
releases past the matrix, with the builds each offers) and clients (kernels / transformers releases past the
ranges pyproject.toml declares). An unreachable upstream is exit 3, an unreachable or unreadable index exit 13.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.build.matrix import load_matrix
from toolkit.core.config import Config
from toolkit.core.errors import Outdated, VendorStateError
from toolkit.core.lock import Lock, read_lock
from toolkit.core.stage import Log, Verdict, quiet
from toolkit.outdated import index as index_mod
from toolkit.outdated.rebase import KEPT, Rebased
from toolkit.outdated.releases import CLIENTS, ClientRange, TorchRelease, client_news, declared_ranges, torch_news
from toolkit.outdated.survey import Commit, Survey, head_ref, survey
from toolkit.outdated.where import Where, open_for_survey, resolve_target, where

SECTIONS = ("upstream", "patches", "torch", "clients")


@dataclass(frozen=True)
class Request:
    upstream: str | None = None  # default: the pin's upstream
    mirror: Path | None = None  # a local clone to read objects from
    rev: str | None = None  # compare with this revision instead of the upstream's head
    index_url: str | None = None  # default: pip's (PIP_INDEX_URL, pip's configuration, pip's default index)
    skip: tuple[str, ...] = ()  # sections not to check (--skip torch ...)
    packages: tuple[str, ...] = ()  # --package/-p (empty: every package)


@dataclass(frozen=True)
class Plan:
    """What `outdated` will read, decided from local files alone: one upstream survey and one index for the
    selected packages (the pin is the family's)."""

    cfg: Config
    views: tuple[Config, ...]
    request: Request
    lock: Lock
    where: Where
    index: str
    index_from: str
    ranges: dict[str, Any]  # client name -> (SpecifierSet, places)

    def lines(self) -> list[str]:
        head = self.request.rev or "its head"
        out = [
            f"would compare the pin {self.lock.commit[:12]} ({self.lock.rev}) with {head} of {self.where.words()}",
        ]
        if "torch" not in self.request.skip:
            names = ", ".join(v.variants_file.name for v in self.views)
            out.append(f"would list torch releases on {self.index} ({self.index_from}) past {names}")
        if "clients" not in self.request.skip:
            rng = ", ".join(f"{n}{s[0]}" for n, s in self.ranges.items()) or "none declared"
            out.append(f"would list {' and '.join(CLIENTS)} releases past the declared ranges ({rng})")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "packages": [v.name for v in self.views],
            "pin": self.lock.commit,
            "upstream": self.where.spec,
            "rev": self.request.rev,
            "index": self.index,
            "index_from": self.index_from,
            "matrices": [v.variants_file.name for v in self.views],
            "ranges": {n: str(s[0]) for n, s in self.ranges.items()},
            "skip": list(self.request.skip),
        }


@dataclass(frozen=True)
class UpstreamSection:
    upstream: str
    pin: str
    head: str
    head_rev: str
    commits: tuple[Commit, ...] | None
    changed_ops: tuple[tuple[str, str], ...]  # (op, "signature changed (breaking)" | "body changed: ...")
    regions: tuple[str, ...]  # fingerprinted regions that moved
    history_note: str = ""

    @property
    def moved(self) -> bool:
        return bool(self.commits) or bool(self.changed_ops) or bool(self.regions)

    def lines(self) -> list[str]:
        if self.pin == self.head:
            return [f"upstream: current (the pin {self.pin[:12]} is {self.head_rev} of {self.upstream})"]
        if self.commits is None:
            n = f"history not available ({self.history_note})"
        else:
            n = f"{len(self.commits)} commit(s) touch this package's closure"
        out = [f"upstream: {self.head_rev} is at {self.head[:12]}, the pin at {self.pin[:12]}: {n}"]
        out += [f"  {c.sha[:12]} {c.date[:10]} {c.subject}" for c in self.commits or ()]
        out += [f"  op {op}: {what}" for op, what in self.changed_ops]
        out += [f"  fingerprint {r} changed" for r in self.regions]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "upstream": self.upstream,
            "pin": self.pin,
            "head": self.head,
            "head_rev": self.head_rev,
            "commits": None if self.commits is None else [c.to_json() for c in self.commits],
            "changed_ops": [{"op": op, "change": what} for op, what in self.changed_ops],
            "regions": list(self.regions),
            "history_note": self.history_note or None,
        }


@dataclass(frozen=True)
class PackageReport:
    """One package's sections."""

    package: str
    upstream: UpstreamSection | None
    patches: tuple[Rebased, ...]
    torch_newest: str
    torch: tuple[TorchRelease, ...] | None
    clients: tuple[ClientRange, ...] | None
    index: str = ""
    skipped: tuple[str, ...] = field(default_factory=tuple)

    def moved(self) -> list[str]:
        what = []
        if self.upstream is not None and self.upstream.moved:
            what.append("upstream")
        if any(p.verdict != KEPT for p in self.patches):
            what.append("patches")
        if self.torch:
            what.append("torch")
        if self.clients and any(c.newer for c in self.clients):
            what.append("clients")
        return what

    def lines(self) -> list[str]:
        out = self.upstream.lines() if self.upstream is not None else ["upstream: not checked"]
        if self.patches:
            out.append(f"patches: {len(self.patches)} in vendor/patches at the head")
            out += [f"  {p.line()}" for p in self.patches]
        elif "patches" not in self.skipped:
            out.append("patches: none in vendor/patches")
        if self.torch is None:
            out.append("torch: not checked")
        elif not self.torch:
            out.append(f"torch: current (the matrix's newest is {self.torch_newest}; index {self.index})")
        else:
            out.append(f"torch: the matrix's newest is {self.torch_newest}; on {self.index}:")
            out += [f"  {t.line()}" for t in self.torch]
        if self.clients is None:
            out.append("clients: not checked")
        else:
            out += [f"clients: {c.line()}" for c in self.clients]
        moved = self.moved()
        out.append(f"{'moved: ' + ', '.join(moved) if moved else 'everything is current'}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "current": not self.moved(),
            "moved": self.moved(),
            "upstream": self.upstream.to_json() if self.upstream else None,
            "patches": [p.to_json() for p in self.patches],
            "torch": None
            if self.torch is None
            else {
                "index": self.index,
                "matrix_newest": self.torch_newest,
                "releases": [t.to_json() for t in self.torch],
            },
            "clients": None if self.clients is None else [c.to_json() for c in self.clients],
        }


@dataclass(frozen=True)
class Report(Verdict):
    """`outdated`'s report: ok (exit 0) only when every section checked is current for every package."""

    packages: tuple[PackageReport, ...]

    def failure(self) -> Outdated | None:
        moved = [f"{p.package}: {', '.join(p.moved())}" for p in self.packages if p.moved()]
        if not moved:
            return None
        return Outdated(f"something moved: {'; '.join(moved)}", "review the report; `ggml-vendor update` moves the pin")

    def lines(self) -> list[str]:
        if len(self.packages) == 1:
            return self.packages[0].lines()
        out: list[str] = []
        for p in self.packages:
            out += [f"package {p.package}"] + [f"  {line}" for line in p.lines()]
        return out

    def to_json(self) -> dict[str, Any]:
        if len(self.packages) == 1:
            return self.packages[0].to_json()
        return {"current": self.ok, "packages": {p.package: p.to_json() for p in self.packages}}


def require_pin(cfg: Config) -> Lock:
    lock = read_lock(cfg.vendor_dir)
    if lock is None:
        raise VendorStateError("vendor/ has no pin (no vendor/UPSTREAM)", "run ggml-vendor sync --rev REV first")
    return lock


def plan(cfg: Config, request: Request | None = None, log: Log = quiet) -> Plan:
    req = request or Request()
    lock = require_pin(cfg)
    views = cfg.selected(req.packages)
    idx, idx_from = index_mod.configured_index(req.index_url)
    for view in views:
        load_matrix(view.variants_file)  # a broken matrix is a config error before anything is read
    ranges = declared_ranges(cfg.root / "pyproject.toml")
    log(f"pin {lock.commit[:12]} ({lock.rev}); index {idx} ({idx_from})")
    w = where(cfg.upstream, lock, req.upstream, req.mirror)
    return Plan(cfg, views, req, lock, w, idx, idx_from, ranges)


def run_survey(p: Plan, log: Log) -> Survey:
    """Open the upstream (fetching its new commits into the tool's cache for a URL) and survey the head."""
    log(f"reading {p.where.words()}")
    source, ref = open_for_survey(p.where, p.lock, p.cfg.upstream)
    try:
        rev = p.request.rev or ref or head_ref(source, p.lock)
        target = resolve_target(source, rev)
        shown = p.request.rev or (p.lock.rev if ref else rev)
        log(f"comparing {p.lock.commit[:12]} with {shown} ({target[:12]})")
        return survey(p.cfg, source, p.lock, target, shown if shown != "HEAD" else target)
    finally:
        source.close()


def upstream_section(view: Config, s: Survey) -> UpstreamSection:
    """The survey as one package sees it: the commits touching its closure, its ops' changes."""
    keys = {view.lock_key(op.name) for op in view.ops}
    ops: dict[str, str] = {}
    for b in s.drift.behaviour:
        if b.op in keys:
            what = "signature changed (breaking)" if b.breaking else "body changed: review semantics"
            if ops.get(b.op) != "signature changed (breaking)":
                ops[b.op] = what
    mine = set(s.new.lock.package_files(view.name)) | set(s.pin.package_files(view.name))
    regions = tuple(r.name for r in s.drift.regions if r.path in mine)
    commits = s.per_package_commits.get(view.name, s.commits)
    return UpstreamSection(
        s.upstream,
        s.pin.commit,
        s.new.lock.commit,
        s.target_rev,
        commits,
        tuple(sorted(ops.items())),
        regions,
        s.drift.history_note,
    )


def torch_section(p: Plan, view: Config, log: Log) -> tuple[str, tuple[TorchRelease, ...]]:
    log(f"reading torch releases from {p.index} for {view.variants_file.name}")
    available = index_mod.releases(p.index, "torch")
    return torch_news(
        load_matrix(view.variants_file), view.backends, available, lambda f: index_mod.core_metadata(f, "torch")
    )


def clients_section(p: Plan, log: Log) -> tuple[ClientRange, ...]:
    out = []
    for name in CLIENTS:
        declared = p.ranges.get(name)
        if declared is None:
            out.append(client_news(name, None, ()))
            continue
        log(f"reading {name} releases from {p.index}")
        out.append(client_news(name, declared, index_mod.releases(p.index, name)))
    return tuple(out)


def _patches_of(view: Config, s: Survey) -> tuple[Rebased, ...]:
    """The patches that touch the package's files (a patch of no file of any package belongs to all)."""
    mine = set(s.pin.package_files(view.name)) | set(s.new.lock.package_files(view.name))
    info = {f.path: f for f in s.pin.file_info}
    touching = {name for f in info.values() for name in f.patched_by}
    return tuple(
        r for r in s.patches if r.name not in touching or any(r.name in info[f].patched_by for f in mine if f in info)
    )


def execute(p: Plan, log: Log = quiet) -> Report:
    skip = p.request.skip
    s = run_survey(p, log) if ("upstream" not in skip or "patches" not in skip) else None
    clients = clients_section(p, log) if "clients" not in skip else None
    out = []
    for view in p.views:
        up = upstream_section(view, s) if s is not None and "upstream" not in skip else None
        patches = _patches_of(view, s) if s is not None and "patches" not in skip else ()
        newest, torch = torch_section(p, view, log) if "torch" not in skip else ("", None)
        shown = "pip's default index" if p.index_from == index_mod.PIP_DEFAULT else p.index
        out.append(PackageReport(view.name, up, patches, newest, torch, clients, shown, skip))
    return Report(tuple(out))


__all__ = ["PackageReport", "Plan", "Report", "Request", "SECTIONS", "execute", "plan", "require_pin"]
