"""Opening the upstream for `outdated` and `update`: a local clone or mirror as it is, or a URL whose commits
since the pin are fetched into the tool's upstream cache (commits and trees only; the blobs the closure needs
come later, in one round trip, as sync fetches them). Only the cache is written, never the project.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from toolkit.core.errors import UpstreamError
from toolkit.core.lock import Lock
from toolkit.sync import embedded
from toolkit.sync.git_run import last_line, run_git
from toolkit.sync.upstream import (
    Source,
    _cache_dir_for,
    _create_cache,
    _fetch_error,
    is_url,
    open_upstream,
    validate_rev,
)

_HEX_RE = re.compile(r"^[0-9a-f]{7,64}$")


@dataclass(frozen=True)
class Where:
    """Which upstream to read and how: `spec` as configured (or the lock's), `mirror` a local clone."""

    spec: str
    mirror: Path | None

    @property
    def needs_network(self) -> bool:
        return self.mirror is None and is_url(self.spec)

    def words(self) -> str:
        return f"{self.spec} (objects from {self.mirror})" if self.mirror else self.spec


def where(configured: str, lock: Lock, upstream: str | None, mirror: Path | None) -> Where:
    """The request's upstream, else the lock's (the pin's own repository), else the configured one."""
    return Where(upstream or lock.upstream or configured, mirror)


def _since(lock: Lock) -> str:
    """A day before the pin's commit date: a shallow fetch from then on holds the pin and every commit after."""
    try:
        return (datetime.fromisoformat(lock.date) - timedelta(days=1)).date().isoformat()
    except ValueError:
        return "2000-01-01"


def _remote_branch(cache: Path, url: str, rev: str) -> bool:
    proc = run_git(cache, "ls-remote", "--heads", "--end-of-options", "origin", rev, check=False)
    if proc.returncode != 0:
        raise _fetch_error(url, rev, last_line(proc.stderr))
    return bool(proc.stdout.strip())


def _open_url_history(url: str, lock: Lock) -> tuple[Source, str]:
    """The cache of `url` holding the pin and the head with the history between; (source, head ref)."""
    cache = _cache_dir_for(url)
    if not (cache / "HEAD").exists():
        _create_cache(url, cache)
    rev = lock.rev or ""
    ref = rev if rev and not _HEX_RE.match(rev) and _remote_branch(cache, url, rev) else "HEAD"
    proc = run_git(
        cache,
        "fetch",
        "-q",
        "--filter=blob:none",
        "--no-tags",
        f"--shallow-since={_since(lock)}",
        "--end-of-options",
        "origin",
        f"+{ref}:refs/ggml-vendor/head",
        check=False,
    )
    if proc.returncode != 0:
        raise _fetch_error(url, ref, last_line(proc.stderr))
    return Source(cache, url, partial=True, url=url), "refs/ggml-vendor/head"


def open_for_survey(w: Where, lock: Lock, configured: str, *, offline: bool = False) -> tuple[Source, str | None]:
    """(the opened upstream, the ref that is its head; None: find it with survey.head_ref). `offline` (a plan):
    nothing is fetched or built (NeedsFetch for the embedded miniature not built yet)."""
    if w.needs_network:
        return _open_url_history(w.spec, lock)
    start = embedded.BRANCH if w.spec == embedded.EMBEDDED and w.mirror is None else lock.commit
    try:
        source, _ = open_upstream(w.spec, start, mirror=w.mirror, configured=configured, offline=offline)
    except UpstreamError as exc:
        if "unknown revision" in exc.message:
            raise UpstreamError(
                f"the pinned commit {lock.commit[:12]} is not in {w.words()}",
                "point --upstream/--mirror at a clone of the repository the pin came from",
            ) from None
        raise
    return source, None


def resolve_target(source: Source, rev: str) -> str:
    """The full commit id of `rev` in `source` (validated: no options, no revision syntax)."""
    validate_rev(rev)
    return source.resolve(rev)


__all__ = ["Where", "open_for_survey", "resolve_target", "where"]
