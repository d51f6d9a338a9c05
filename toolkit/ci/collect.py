"""`ggml-vendor collect`: merge per-variant build artifacts (one per CI job) into build/.

An artifact is what a job of the generated workflow uploads: a directory (or the .zip a browser downloads)
holding `<variant>/` and `.verified.json`, the verification record `ggml-vendor verify` wrote on the runner.
Each variant is admitted only when it is

* complete: metadata.json parses and every file its digest lists is there with that hash, nothing else;
* from this source tree: the lock (vendor/UPSTREAM), the build inputs (source-id: rendered sources + vendor/)
  and the repository commit it records are this checkout's;
* verified: the record says verify passed on the runner for exactly these bytes;
* still sound here: verify's host-independent checks (layout, metadata, binaries, archs, ABI, symbols,
  Metal library, provenance) pass again on this machine. The import test needs the variant's own platform
  and is not repeated.

It follows the stage protocol (toolkit/core/stage.py):

    plan(config, request, log) -> Plan      finds the artifacts and runs every check on their bytes where they
                                            lie (a .zip is unpacked into a private temporary directory outside
                                            the project and the cache, removed before plan returns); decides
                                            what is added, replaced, kept and refused; writes nothing
    execute(plan, log) -> Report            rolls back a swap a killed run left half done, copies the admitted
                                            variants into a staging directory beside build/, refuses any whose
                                            copy differs from the bytes the plan checked, then swaps them in
                                            and merges their records into build/.verified.json

Anything refused is named with its artifact and the reason, and build/ is not touched. Otherwise the variants
are swapped into build/ (each replacing its previous directory, other variants kept); an error or Ctrl-C
midway restores the previous state, so build/ is either the old or the new one.

Finding and reading the artifacts is toolkit/ci/intake.py; the checks a variant must pass, toolkit/ci/admission.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.ci.admission import Context, Incoming, check_artifact, local_identity
from toolkit.ci.intake import RECORD, Refusal, find_artifacts, read_artifact
from toolkit.core import fs
from toolkit.core.config import Config
from toolkit.core.errors import CollectError, Interrupted
from toolkit.core.stage import Log, Verdict, quiet
from toolkit.verify import record as vrecord  # the one owner of the verification record

__all__ = ["Request", "Plan", "Report", "Refusal", "Incoming", "plan", "execute", "interrupted", "collect"]

STAGING_PREFIX = ".collect-"


@dataclass(frozen=True)
class Request:
    """The artifacts to collect (directories or .zip files, or directories of them); `build_dir` overrides
    the package's build/ (tests, a staging checkout)."""

    artifacts: tuple[Path, ...]
    build_dir: Path | None = None


def _refused(refusals: tuple[Refusal, ...], report: Any) -> CollectError | None:
    """The one error a refusal ends the command with (the report rides on it as `.report`), or None."""
    if not refusals:
        return None
    err = CollectError(
        f"refused {len(refusals)} artifact problem(s); first: {refusals[0].line()}",
        "re-run the job that uploaded it (same commit, verify passing); build/ is unchanged",
    )
    err.report = report  # type: ignore[attr-defined]
    return err


def _no_variants() -> CollectError:
    return CollectError("no variants to collect", "pass the artifact directories (or zips) the jobs uploaded")


def _json(plan: Plan, refusals: tuple[Refusal, ...], *, dry_run: bool, committed: bool) -> dict[str, Any]:
    return {
        "ok": not refusals and bool(plan.incoming),
        "dry_run": dry_run,
        "committed": committed,
        "build_dir": str(plan.build_dir),
        "artifacts": list(plan.artifacts),
        "variants": [i.to_json() for i in plan.incoming],
        "kept": list(plan.kept),
        "refused": [r.to_json() for r in refusals],
        "recover": list(plan.recover),
    }


def _lines(plan: Plan, refusals: tuple[Refusal, ...], verbs: dict[str, str] | None) -> list[str]:
    """The plan's or report's lines: the roll-backs, the variants (`verbs` per action; None: not brought in),
    the refusals and what build/ keeps."""
    out: list[str] = []
    if verbs is not None:
        out += [f"roll back the interrupted swap of {name}" for name in plan.recover]
        out += [
            f"{verbs[i.action]} {i.variant} from {i.artifact} (re-checked here: {', '.join(i.rechecked)})"
            for i in plan.incoming
        ]
    out += [f"refused {r.line()}" for r in refusals]
    out += [f"kept {name} (already in build/, no artifact replaces it)" for name in plan.kept]
    return out


@dataclass(frozen=True)
class Plan(Verdict):
    """What collect will do: the variants to swap into build/ (each checked), the refusals, the variants
    build/ keeps, and the interrupted swaps of killed runs to roll back first. Not ok when anything is
    refused (exit 11): then execute changes nothing but that roll-back."""

    cfg: Config
    build_dir: Path
    artifacts: tuple[str, ...]
    incoming: tuple[Incoming, ...]
    refusals: tuple[Refusal, ...]
    kept: tuple[str, ...]
    recover: tuple[str, ...] = ()

    dry_run = True  # the protocol's dry run prints the plan: the printer's word for "would"
    committed = False

    def failure(self) -> CollectError | None:
        refused = _refused(self.refusals, self)
        return refused if refused or self.incoming else _no_variants()

    def lines(self) -> list[str]:
        out = _lines(self, self.refusals, {"add": "would add", "replace": "would replace"})
        if self.ok:
            out.append(f"{len(self.incoming)} variant(s) would be collected; nothing changed (--dry-run)")
        return out

    def to_json(self) -> dict[str, Any]:
        return _json(self, self.refusals, dry_run=True, committed=False)


@dataclass(frozen=True)
class Report(Verdict):
    """What execute did: `committed` when the variants are in build/; `refusals` are the plan's and any
    found while copying (an artifact changed after the plan checked it), build/ then unchanged."""

    plan: Plan
    committed: bool = False
    refusals: tuple[Refusal, ...] = ()
    recovered: tuple[str, ...] = ()

    dry_run = False

    @property
    def build_dir(self) -> Path:
        return self.plan.build_dir

    @property
    def artifacts(self) -> tuple[str, ...]:
        return self.plan.artifacts

    @property
    def incoming(self) -> tuple[Incoming, ...]:
        return self.plan.incoming

    @property
    def kept(self) -> tuple[str, ...]:
        return self.plan.kept

    def failure(self) -> CollectError | None:
        refused = _refused(self.refusals, self)
        return refused if refused or self.committed else _no_variants()

    def lines(self) -> list[str]:
        verbs = {"add": "added", "replace": "replaced"} if self.committed else None
        out = list(self.recovered) + _lines(self.plan, self.refusals, verbs)
        if self.committed:
            out.append(f"collected {len(self.incoming)} variant(s) into {self.build_dir}; records merged into {RECORD}")
        return out

    def to_json(self) -> dict[str, Any]:
        return _json(self.plan, self.refusals, dry_run=False, committed=self.committed)


CollectReport = Report  # the name older callers use


# --- the plan ------------------------------------------------------------------------------------------


def _interrupted_swaps(build_dir: Path) -> tuple[str, ...]:
    """The variants whose swap a killed run left journaled (execute rolls each back before anything else)."""
    return tuple(target.name for target in fs.journaled_targets(build_dir))


def _kept(build_dir: Path, incoming: list[Incoming], recovering: tuple[str, ...]) -> tuple[str, ...]:
    """The variants build/ holds (or holds again once a roll-back is done) that no artifact replaces."""
    from toolkit.verify.runner import is_variant_dir

    present = {p.name for p in build_dir.iterdir() if is_variant_dir(p)} if build_dir.is_dir() else set()
    return tuple(sorted((present | set(recovering)) - {i.variant for i in incoming}))


def plan(config: Config, request: Request, log: Log = quiet) -> Plan:
    """Check every artifact against this checkout and decide what build/ becomes; writes nothing. Raises
    CollectError when there is nothing to compare with (no vendor/UPSTREAM, build inputs unreadable)."""
    from toolkit.core.lock import read_lock

    build_dir = request.build_dir or config.build_dir
    recovering = _interrupted_swaps(build_dir)
    ctx = Context(config, local_identity(config), read_lock(config.vendor_dir), build_dir, recovering)
    found, refusals = find_artifacts(list(request.artifacts))
    incoming: list[Incoming] = []
    for name, src in found:
        log(f"checking {name}")
        admitted, refused = check_artifact(ctx, name, src)
        incoming += admitted
        refusals += refused
    kept = _kept(build_dir, incoming, recovering)
    return Plan(config, build_dir, tuple(n for n, _ in found), tuple(incoming), tuple(refusals), kept, recovering)


# --- execute: roll back, copy, swap ----------------------------------------------------------------------


def _recover(build_dir: Path, swaps: tuple[str, ...]) -> tuple[str, ...]:
    """What killed runs left in build/: the planned swaps stopped between their two renames are rolled back
    (the previous variant put back), and their staging and moved-aside trees are removed (only those whose
    process is dead: a dry run may be reading beside us). Returns what was put back."""
    if not build_dir.is_dir():
        return ()
    done = [action for name in swaps for action in fs.recover_swap(build_dir / name)]
    fs.stale_staging(build_dir, STAGING_PREFIX)
    fs.stale_entries(build_dir, ".*.old-*")
    return tuple(done)


def _stage(plan: Plan, staging: Path, log: Log) -> tuple[list[tuple[Incoming, Path]], list[Refusal]]:
    """Copy (or unpack) every admitted variant's artifact into `staging`, once per artifact; a variant whose
    copy is not the tree the plan checked (the artifact changed since) is refused."""
    copies: dict[Path, Path | str] = {}  # artifact -> its copy, or why it cannot be read
    staged: list[tuple[Incoming, Path]] = []
    refused: list[Refusal] = []
    for item in plan.incoming:
        log(f"copying {item.variant} from {item.artifact}")
        if item.source not in copies:
            root = staging / f"a{len(copies)}"
            copies[item.source] = read_artifact(item.source, root) or root
        copy = copies[item.source]
        if isinstance(copy, str):
            refused.append(Refusal(item.artifact, item.variant, "incomplete", copy))
        elif not (copy / item.variant).is_dir() or vrecord.tree_sha256(copy / item.variant) != item.tree_sha256:
            why = "its files changed after collect checked them; run collect again"
            refused.append(Refusal(item.artifact, item.variant, "changed", why))
        else:
            staged.append((item, copy / item.variant))
    return staged, refused


def execute(plan: Plan, log: Log = quiet) -> Report:
    """Do what `plan` lists: the roll-backs, then (when nothing was refused) the copies and the swap into
    build/ with the merged records; build/ ends in the old state or the new one."""
    recovered = _recover(plan.build_dir, plan.recover)
    if not plan.ok:
        return Report(plan, refusals=plan.refusals, recovered=recovered)
    created = not plan.build_dir.exists()
    staging = fs.new_staging(plan.build_dir, STAGING_PREFIX)
    committed = False
    try:
        staged, refused = _stage(plan, staging, log)
        if refused:
            return Report(plan, refusals=tuple(refused), recovered=recovered)
        _commit(plan.build_dir, staging, staged)
        committed = True
        return Report(plan, committed=True, recovered=recovered)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and not committed:
            with contextlib.suppress(OSError):
                plan.build_dir.rmdir()  # only when we created it and left it empty


def interrupted(plan: Plan) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C anywhere after `plan` was made, the report's printing
    included: which admitted variants build/ holds, with their records, read back from disk (a swap a kill
    cut between its renames rolled back first)."""
    fs.recover_swaps(plan.build_dir)
    records = vrecord.entries(plan.build_dir)
    held = []
    for item in plan.incoming:
        tree = plan.build_dir / item.variant
        same = tree.is_dir() and vrecord.tree_sha256(tree) == item.tree_sha256
        if same and records.get(item.variant, {}).get("collected", {}).get("artifact") == item.artifact:
            held.append(item.variant)
    if plan.ok and plan.incoming and len(held) == len(plan.incoming):
        return Interrupted(
            f"build/ holds the collected {', '.join(held)} and their records (read back from disk): "
            "the collect had completed",
            "nothing to undo",
        )
    if not held:
        return Interrupted("build/ is as it was: nothing was collected (read back from disk)", "run the collect again")
    missing = [i.variant for i in plan.incoming if i.variant not in held]
    return Interrupted(
        f"build/ holds the collected {', '.join(held)} but not {', '.join(missing)} (read back from disk)",
        "run the collect again",
    )


def _swap_back(target: Path, old: Path | None) -> None:
    if old is None:
        shutil.rmtree(target, ignore_errors=True)
    elif not fs.exchange(old, target):
        shutil.rmtree(target, ignore_errors=True)
        os.rename(old, target)


def _commit(build_dir: Path, staging: Path, staged: list[tuple[Incoming, Path]]) -> None:
    """Swap every staged variant into build/ and merge the records; on any failure (or Ctrl-C) undo what
    was done, so build/ ends in the old or the new state."""
    fs.reset_checkpoints()
    # (target, its previous tree or None), kept until the whole merge is done so a failure can put it back; a
    # SIGKILL inside the fallback swap's two renames is rolled back by the next run's `_recover`
    moved: list[tuple[Path, Path | None]] = []
    record_before = vrecord.snapshot(build_dir)
    try:
        for item, tree in staged:
            target = build_dir / item.variant
            moved.append((target, fs.swap_keeping_old(tree, target)))
        _merge_records(build_dir, [item for item, _ in staged])
    except BaseException:
        for target, old in reversed(moved):
            _swap_back(target, old)
        vrecord.restore(build_dir, record_before)
        raise
    for _target, old in moved:
        if old is not None and staging not in old.parents:
            shutil.rmtree(old, ignore_errors=True)  # the fallback's moved-aside trees (the rest go with staging)


def _merge_records(build_dir: Path, incoming: list[Incoming]) -> None:
    vrecord.merge_collected(build_dir, ((i.variant, i.record, i.artifact, list(i.rechecked)) for i in incoming))


# --- library use -----------------------------------------------------------------------------------------


def collect(
    cfg: Config,
    paths: list[Path],
    *,
    dry_run: bool = False,
    build_dir: Path | None = None,
    progress: Log | None = None,
) -> Plan | Report:
    """plan + execute (only plan when `dry_run`) in one call, for library use and tests. Raises CollectError
    when anything is refused (the plan or report rides on the exception as `.report`)."""
    log = progress or quiet
    planned = plan(cfg, Request(tuple(paths), build_dir), log)
    result: Plan | Report = planned if dry_run else execute(planned, log)
    error = result.error()
    if error is not None:
        raise error
    return result
