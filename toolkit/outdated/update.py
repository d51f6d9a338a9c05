"""`ggml-vendor update`: move the pin, carry the patches, add torch rows, render, and report as Markdown.

plan(config, request, log) -> Plan     the survey of the upstream at the target (a local clone or mirror is
                                       read as it is; a URL's fetch is the plan's first step), the patch
                                       series rebased by a three-way apply (a conflict is a PatchError here,
                                       before anything is written), sync's new vendor/ tree; with --torch,
                                       reading the index is a step of the plan
interrupted(plan) -> Interrupted       a Ctrl-C once the plan is made: how far the update got, read back
                                       from disk (update_readback.py)
execute(plan, log) -> Report           the planned reads, then vendor/ swapped atomically (sync's swap), the
                                       matrix files, render (and the CI workflow when a matrix changed), the
                                       drift report and build/reports/update-<old>-<new>.md (the PR body)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toolkit.build.matrix import PYPI, load_matrix
from toolkit.core import fs
from toolkit.core.config import Config
from toolkit.core.errors import ConfigError, VendorStateError
from toolkit.core.lock import Lock
from toolkit.core.stage import Log, quiet
from toolkit.outdated import index as index_mod
from toolkit.outdated.matrix_edit import MatrixEdit, add_torch_rows
from toolkit.outdated.rebase import KEPT, first_conflict
from toolkit.outdated.releases import torch_news
from toolkit.outdated.report import markdown
from toolkit.outdated.stage import require_pin
from toolkit.outdated.survey import Survey, head_ref, survey
from toolkit.outdated.update_readback import interrupted, matrix_digests, report_name
from toolkit.outdated.where import Where, open_for_survey, resolve_target, where
from toolkit.sync.drift import write_report
from toolkit.sync.outcome import Succeeded
from toolkit.sync.project_plan import family_facts
from toolkit.sync.tree_plan import SyncPlan, plan_sync
from toolkit.sync.upstream import NeedsFetch, Source
from toolkit.sync.vendor_tree import check_vendor_dir, current_hashes, read_patches, replace_vendor


@dataclass(frozen=True)
class Request:
    rev: str | None = None  # move to this revision; None: the upstream's head (--latest)
    latest: bool = False
    torch: bool = False  # add the index's new torch builds to each package's matrix
    upstream: str | None = None
    mirror: Path | None = None
    index_url: str | None = None
    report_file: Path | None = None  # also write the Markdown report here (the pull request's body)


@dataclass(frozen=True)
class Plan:
    cfg: Config
    request: Request
    pin: Lock
    where: Where
    survey: Survey | None  # None: the upstream must be fetched first (a URL)
    sync: SyncPlan | None
    index: str
    index_from: str
    first: tuple[str, ...] = ()  # reads execute does before anything else (fetch, index)
    # each matrix file's sha256 as planned (None: missing): what a Ctrl-C's read-back compares with
    matrices_before: tuple[tuple[Path, str | None], ...] = ()

    @property
    def moves(self) -> bool:
        return self.survey is not None and (self.survey.moved or any(p.verdict != KEPT for p in self.survey.patches))

    def lines(self) -> list[str]:
        out = [f"first: {step}" for step in self.first]
        s = self.survey
        if s is not None:
            new = s.new.lock
            if s.moved:
                n = "?" if s.commits is None else str(len(s.commits))
                out.append(
                    f"would move the pin {self.pin.commit[:12]} -> {new.commit[:12]} ({s.target_rev}) of {s.upstream}: "
                    f"{n} commit(s) touch the closure"
                )
                out += [f"  {b.headline()}" for b in s.drift.behaviour]
            else:
                out.append(f"the pin {self.pin.commit[:12]} is the upstream's head: vendor/ stays")
            out += [f"  patch {p.line()}" for p in s.patches]
            if self.sync is not None and self.sync.changes:
                out.append(f"  vendor/: {len(self.sync.changes)} change(s), then render")
        return out

    def to_json(self) -> dict[str, Any]:
        s = self.survey
        return {
            "first": list(self.first),
            "pin": self.pin.commit,
            "target": s.new.lock.commit if s else None,
            "rev": s.target_rev if s else self.request.rev,
            "commits": None if s is None or s.commits is None else [c.to_json() for c in s.commits],
            "patches": [p.to_json() for p in s.patches] if s else [],
            "changes": [{"path": f"vendor/{p}", "change": c} for p, c in self.sync.changes] if self.sync else [],
            "torch": self.request.torch,
            "index": self.index,
        }


@dataclass(frozen=True)
class Report(Succeeded):
    """What update did; refusals are raised, so a report is a success."""

    plan: Plan
    matrices: tuple[MatrixEdit, ...]
    rendered: tuple[str, ...]
    markdown: str
    report_paths: tuple[str, ...]
    wrote_vendor: bool
    drift_paths: tuple[str, ...] = field(default_factory=tuple)

    def lines(self) -> list[str]:
        p, s = self.plan, self.plan.survey
        assert s is not None
        out = []
        if self.wrote_vendor:
            out.append(f"moved the pin {p.pin.commit[:12]} -> {s.new.lock.commit[:12]} ({s.target_rev})")
        else:
            out.append(f"vendor/ unchanged (the pin {p.pin.commit[:12]} is current)")
        out += [f"  patch {r.line()}" for r in s.patches]
        out += [f"  {line}" for m in self.matrices for line in m.lines()]
        out += [f"  rendered {r}" for r in self.rendered]
        out += [f"  drift report: {d}" for d in self.drift_paths]
        out += [f"  report: {r}" for r in self.report_paths]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            **self.plan.to_json(),
            "first": [],
            "wrote_vendor": self.wrote_vendor,
            "matrices": [{"path": m.path.name, "changes": m.lines()} for m in self.matrices],
            "rendered": list(self.rendered),
            "drift_report": list(self.drift_paths),
            "report": list(self.report_paths),
            "markdown": self.markdown,
        }


def _checked(req: Request) -> None:
    if req.rev is not None and req.latest:
        raise ConfigError("--rev and --latest name two different targets", "pass one of them")


def _vendor_plan(cfg: Config, s: Survey, source: Source, pin: Lock) -> SyncPlan:
    """sync's tree for the target with the rebased series (dropped patches leave vendor/patches/)."""
    conflict = first_conflict(s.patches)
    if conflict is not None:
        raise conflict
    _, others = read_patches(cfg.vendor_dir)
    kept = [(r.name, r.data) for r in s.patches if r.data is not None]
    snapshot = source.snapshot(s.new.lock.commit)
    findings = check_vendor_dir(cfg.vendor_dir, pin) if cfg.vendor_dir.exists() else []
    plan = plan_sync(
        cfg.all_entries(None),
        snapshot,
        upstream=source.recorded,
        rev=s.target_rev,
        patches=kept,
        extra_patch_files=others,
        previous=pin,
        current=current_hashes(cfg.vendor_dir),
        findings=findings,
        prefetch=snapshot.prefetch,
        **family_facts(cfg),
    )
    if plan.overwrites:
        raise VendorStateError(
            f"vendor/ has local changes ({plan.overwrites[0].line()}) that the update would overwrite",
            "save them as a patch (ggml-vendor patch save NAME) or discard them (ggml-vendor sync --force) first",
        )
    return plan


def _surveyed(
    cfg: Config, req: Request, w: Where, pin: Lock, log: Log, *, offline: bool = False
) -> tuple[Survey, SyncPlan]:
    source, ref = open_for_survey(w, pin, cfg.upstream, offline=offline)
    try:
        rev = req.rev or ref or head_ref(source, pin)
        target = resolve_target(source, rev)
        recorded = req.rev or (pin.rev if ref else rev)
        if recorded == "HEAD":
            recorded = target
        log(f"surveying {pin.commit[:12]} -> {target[:12]} ({recorded})")
        s = survey(cfg, source, pin, target, recorded)
        return s, _vendor_plan(cfg, s, source, pin)
    finally:
        source.close()


def plan(cfg: Config, request: Request | None = None, log: Log = quiet) -> Plan:
    req = request or Request()
    _checked(req)
    pin = require_pin(cfg)
    for view in cfg.selected(()):
        load_matrix(view.variants_file)  # a broken matrix stops here, before anything is read
    w = where(cfg.upstream, pin, req.upstream, req.mirror)
    idx, idx_from = index_mod.configured_index(req.index_url)
    first = [f"read torch releases from {idx} ({idx_from})"] if req.torch else []
    before = matrix_digests(cfg)
    if w.needs_network:
        first.insert(0, f"fetch the commits since the pin from {w.spec} into the tool's cache")
        return Plan(cfg, req, pin, w, None, None, idx, idx_from, tuple(first), before)
    try:
        s, sync_plan = _surveyed(cfg, req, w, pin, log, offline=True)
    except NeedsFetch as need:  # the embedded miniature is not built yet: building it is the first step
        return Plan(cfg, req, pin, w, None, None, idx, idx_from, (need.what, *first), before)
    return Plan(cfg, req, pin, w, s, sync_plan, idx, idx_from, tuple(first), before)


def _torch_edits(p: Plan, log: Log) -> tuple[MatrixEdit, ...]:
    log(f"reading torch releases from {p.index}")
    available = index_mod.releases(p.index, "torch")
    # pip's own index (its default, its configuration or PIP_INDEX_URL) is "pypi" in the matrix: provisioning
    # uses pip as it is set up. Only an index named on the command line is written down.
    written = p.index.rstrip("/") if p.index_from == "--index-url" else PYPI
    words = "pip's index" if written == PYPI else p.index
    edits, seen = [], set()
    for view in p.cfg.selected(()):
        path = view.variants_file
        if path in seen:
            continue
        seen.add(path)
        _, releases = torch_news(
            load_matrix(path), view.backends, available, lambda f: index_mod.core_metadata(f, "torch")
        )
        edit = add_torch_rows(path, releases, written, words)
        if edit.changed:
            edits.append(edit)
    return tuple(edits)


def _render_all(cfg: Config, matrices_changed: bool, log: Log) -> tuple[str, ...]:
    from toolkit import render
    from toolkit.ci import workflow
    from toolkit.core.config import load

    fresh = load(cfg.root)  # the new vendor/UPSTREAM and matrices
    done: list[str] = []
    for view in fresh.selected(()):
        rep = render.execute(render.plan(view, render.Request(), log), log)
        done += [f"{view.name}: {line}" for line in rep.lines() if not line.startswith("unchanged")]
    if matrices_changed:
        done += workflow.execute(workflow.plan(fresh, workflow.Request(), log), log).lines()
    return tuple(done)


def execute(p: Plan, log: Log = quiet) -> Report:
    if p.survey is None:  # a URL upstream: fetch its new commits, then plan the tree
        s, sync_plan = _surveyed(p.cfg, p.request, p.where, p.pin, log)
        p = replace(p, survey=s, sync=sync_plan)
    assert p.survey is not None and p.sync is not None
    matrices = _torch_edits(p, log) if p.request.torch else ()
    cfg, s, sync_plan = p.cfg, p.survey, p.sync
    wrote_vendor = bool(sync_plan.changes)
    drift_paths: tuple[str, ...] = ()
    if wrote_vendor:
        log(f"writing vendor/ ({len(sync_plan.changes)} changes)")
        replace_vendor(
            cfg.root, sync_plan.desired, known={k: v for k, v in current_hashes(cfg.vendor_dir).items() if v}
        )
        if s.moved:
            drift_paths = tuple(str(x) for x in write_report(cfg.build_dir, s.drift))
    for m in matrices:
        log(f"writing {m.path}")
        fs.atomic_write(m.path, m.new.encode("utf-8"))
    rendered = _render_all(cfg, bool(matrices), log) if (wrote_vendor or matrices) else ()
    text = markdown(p.pin, s, matrices, rendered, [v.name for v in cfg.selected(())])
    reports = _write_reports(cfg, p, text)
    return Report(p, matrices, rendered, text, reports, wrote_vendor, drift_paths)


def _write_reports(cfg: Config, p: Plan, text: str) -> tuple[str, ...]:
    assert p.survey is not None
    paths = [cfg.reports_dir / report_name(p.pin.commit, p.survey.new.lock.commit)]
    if p.request.report_file is not None:
        paths.append(p.request.report_file)
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        fs.atomic_write(path, text.encode("utf-8"))
    return tuple(str(x) for x in paths)


__all__ = ["Plan", "Report", "Request", "execute", "interrupted", "plan"]
