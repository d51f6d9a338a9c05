"""Refusals before anything is pushed: no variants, unverified or changed-since-verify builds, dirty builds
or vendor/, mixed versions, Git LFS pointer stubs, a missing token. Offline and read-only."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.core.config import Config
from toolkit.core.errors import PublishError
from toolkit.core.lock import Lock
from toolkit.core.records import sub_table
from toolkit.verify import (
    check_file,
    check_vendor_clean,
    conformance_status,
    discover,
    non_regular,
    runnable_here,
    stamp_verdict,
)


@dataclass(frozen=True)
class Ready:
    """What preflight established: the variants to ship, their shared version, the lock (for the card)."""

    variant_dirs: tuple[Path, ...]
    version: int
    lock: Lock | None
    conformance: dict[str, str] = field(default_factory=dict)  # variant -> "passed: ..." / "not run (why)"


def resolve_token(token: str | None) -> str:
    """--token, else HF_TOKEN, else the token huggingface_hub stored at login. Never echoed anywhere."""
    if token:
        return token
    env = os.environ.get("HF_TOKEN")
    if env:
        return env
    try:
        from huggingface_hub import get_token

        stored = get_token()
    except Exception:  # a broken token file is the same as none for this purpose
        stored = None
    if stored:
        return stored
    raise PublishError(
        "no Hugging Face token: publishing needs write access", "set HF_TOKEN, pass --token, or run `hf auth login`"
    )


def _dirty(name: str, meta: dict[str, Any]) -> list[str]:
    """A dirty build is one whose vendor/ differed from the lock (provenance["ggml-vendor"].dirty, which
    must say false) or whose checkout had uncommitted changes (provenance.kernel.dirty, written when the
    project is a git checkout): neither can be re-created from a commit, so neither ships."""
    prov = sub_table(meta, "provenance")
    ours, kernel = sub_table(prov, "ggml-vendor"), sub_table(prov, "kernel")
    out = []
    if ours.get("dirty") is not False:
        out.append(f"{name} is a dirty build (provenance dirty={ours.get('dirty')!r})")
    if kernel.get("dirty") is not None and kernel.get("dirty") is not False:
        commit = str(kernel.get("commit") or "?")[:12]
        out.append(
            f"{name} is a dirty build: built from a checkout with uncommitted changes (at {commit}); "
            "commit them and build again"
        )
    return out


def _verdict(build_dir: Path, d: Path, official_hub: bool) -> tuple[str, list[str]]:
    """(recorded conformance status, problems) of one variant's verification record."""
    problems = []
    ok, why = stamp_verdict(build_dir, d, official_hub=official_hub)
    if not ok:
        problems.append(f"{d.name} is unverified ({why})")
    status = conformance_status(build_dir, d.name)
    if ok and not status.startswith("passed") and runnable_here(d.name)[0]:
        # the gate is required wherever it can run
        problems.append(
            f"{d.name}: conformance {status}, but this host can run it "
            "(run ggml-vendor verify without --no-conformance)"
        )
    return status, problems


def _content_problems(d: Path, meta: dict[str, Any]) -> list[str]:
    problems = _dirty(d.name, meta)
    # Stubs are re-checked here even though verify passed: the tree may have been re-checked-out since.
    for f in sorted(p for p in d.rglob("*") if p.is_file()):
        with f.open("rb") as fh:
            why = check_file(f.relative_to(d).as_posix(), fh.read(4096))
        if why:
            problems.append(f"{d.name}: {why}")
    return problems


def _version_problems(cfg: Config, versions: dict[Any, list[str]]) -> list[str]:
    if len(versions) > 1:
        return ["mixed versions: " + "; ".join(f"v{v}: {', '.join(n)}" for v, n in sorted(versions.items(), key=str))]
    version = next(iter(versions), None)
    if version is not None and version != cfg.version:
        return [f"variants are version {version} but [tool.ggml-vendor] version is {cfg.version}"]
    return []


def preflight(
    cfg: Config,
    names: list[str] | None,
    *,
    build_dir: Path | None = None,
    check_vendor: bool = True,
    official_hub: bool = False,
) -> Ready:
    """Everything that must hold before a byte is pushed; PublishError naming the first problems if not."""
    build_dir = build_dir or cfg.build_dir
    dirs = discover(build_dir, names)
    if not dirs:
        raise PublishError(f"nothing to publish: no variants under {build_dir}", "run ggml-vendor build first")
    problems: list[str] = []
    versions: dict[Any, list[str]] = {}
    statuses: dict[str, str] = {}
    for d in dirs:
        odd = non_regular(d)
        if odd:  # nothing of it is opened, let alone uploaded: a link's target is not the variant's file
            problems.append(f"{d.name} holds entries that are not regular files ({'; '.join(odd[:2])})")
            continue
        statuses[d.name], found = _verdict(build_dir, d, official_hub)
        problems += found
        try:
            meta = json.loads((d / "metadata.json").read_text())
        except (OSError, ValueError):
            problems.append(f"{d.name} has no readable metadata.json")
            continue
        versions.setdefault(meta.get("version"), []).append(d.name)
        problems += _content_problems(d, meta)
    problems += _version_problems(cfg, versions)
    lock = None
    if check_vendor:
        findings, lock = check_vendor_clean(cfg)
        problems += [f.message for f in findings if f.failed]
    if problems:
        shown = "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")
        raise PublishError(
            f"refusing to publish, nothing was pushed: {shown}",
            "fix the build, run ggml-vendor verify, then publish again",
        )
    return Ready(tuple(dirs), int(next(iter(versions))), lock, statuses)
