"""The upstream repository: open a local clone, a URL (shallow, filtered, cached) or the embedded miniature,
and resolve a revision safely (git_source.py reads the files at a commit; git_run.py runs git).

Nothing here checks out a tree. Paths handed to `Snapshot.read` are in the standalone-ggml layout; the
snapshot adds llama.cpp's `ggml/` prefix itself and refuses anything that would leave the ggml tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import git

from toolkit.core import ggml_facts, paths
from toolkit.core.errors import UpstreamError
from toolkit.sync.embedded import EMBEDDED, built_mini_upstream, materialize_mini_upstream
from toolkit.sync.git_run import REMOTE, SHA_RE, NeedsFetch, git_env, is_url, last_line, run_git, validate_rev
from toolkit.sync.git_source import (
    NAMED_CONFIGURED,
    NAMED_EMBEDDED,
    NAMED_ORIGIN,
    NAMED_PATH,
    NAMED_URL,
    Snapshot,
    Source,
)

__all__ = [
    "NeedsFetch",
    "Snapshot",
    "Source",
    "open_upstream",
    "check_recorded",
    "canonical_name",
    "url_layout",
    "validate_rev",
    "is_url",
    "cache_root",
]


def cache_root() -> Path:
    return paths.cache_root()


def _cache_dir_for(url: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", url).strip("-")[-48:]
    return cache_root() / "upstreams" / f"{slug}-{hashlib.sha1(url.encode()).hexdigest()[:10]}.git"


def _create_cache(url: str, cache: Path) -> None:
    """An empty filtered (blob:none) bare repository for `url` at `cache`, made beside it and renamed into
    place; a concurrent run that made it first wins (its cache is as good as ours)."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(cache.name + f".tmp-{os.getpid()}")
    subprocess.run(["git", "init", "-q", "--bare", str(tmp)], check=True, capture_output=True, env=git_env())
    for key, value in (
        ("remote.origin.url", url),
        ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
        ("remote.origin.promisor", "true"),
        ("remote.origin.partialclonefilter", "blob:none"),
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", REMOTE),
    ):
        run_git(tmp, "config", key, value)
    if cache.exists():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, cache)


def _fetch_error(url: str, rev: str, msg: str) -> UpstreamError:
    """The one line for a failed fetch of `rev`: an unknown revision, or an unreachable upstream."""
    if re.search(
        r"couldn't find remote ref|not our ref|no such remote ref|unadvertised object|"
        r"did not send all necessary objects|invalid refspec",
        msg,
        re.I,
    ):
        hint = (
            "a URL upstream needs a full 40-digit sha, a tag or a branch"
            if SHA_RE.match(rev) and len(rev) < 40
            else "pass an existing branch, tag or full commit id"
        )
        return UpstreamError(f"unknown revision {rev!r} at {url} ({msg})", hint)
    return UpstreamError(
        f"cannot reach upstream {url}: {msg}",
        "check the URL and the network, or pass --mirror PATH to a local clone",
    )


def _open_cached(url: str, rev: str) -> tuple[Source, str]:
    """The cache of `url` when it already holds `rev` (a full commit id), read offline; else NeedsFetch (a
    branch or tag may have moved: only the network can say)."""
    cache = _cache_dir_for(url)
    full_sha = re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", rev) is not None
    if full_sha and (cache / "HEAD").exists():
        src = Source(cache, url, partial=True, url=url, offline=True)
        if src.has_commit(rev):
            return src, rev
        src.close()
    raise NeedsFetch(f"fetch {rev} from {url} into the tool's cache")


def _open_url(url: str, rev: str, *, offline: bool = False) -> tuple[Source, str]:
    """A filtered, shallow cache of `url` holding `rev`'s commit; (source, full commit id). Offline: only
    what the cache already holds (NeedsFetch otherwise)."""
    if url.startswith("-"):
        raise UpstreamError(f"upstream {url!r} looks like an option", "pass a URL or a path")
    if offline:
        return _open_cached(url, rev)
    cache = _cache_dir_for(url)
    if not (cache / "HEAD").exists():
        _create_cache(url, cache)
    src = Source(cache, url, partial=True, url=url)
    # A pinned full sha already in the cache needs no network at all.
    if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", rev) and src.has_commit(rev):
        return src, rev
    proc = run_git(
        cache,
        "fetch",
        "-q",
        "--depth=1",
        "--filter=blob:none",
        "--no-tags",
        "--end-of-options",
        REMOTE,
        rev,
        check=False,
    )
    if proc.returncode != 0:
        raise _fetch_error(url, rev, last_line(proc.stderr))
    commit = run_git(cache, "rev-parse", "--verify", "FETCH_HEAD^{commit}").stdout.strip()
    # Keep the pinned commit reachable so `git gc` in the cache never drops it.
    run_git(cache, "update-ref", f"refs/ggml-vendor/pins/{commit}", commit)
    return src, commit


def canonical_name(git_dir: Path, configured: str | None) -> tuple[str, str]:
    """What the lock calls a local clone, and how that was chosen: its origin URL, else the configured URL,
    else the path itself (a machine-specific name, used only when the project's upstream is a path too)."""
    proc = run_git(git_dir, "config", "--get", "remote.origin.url", check=False)
    origin = proc.stdout.strip()
    if origin and is_url(origin):
        return origin, NAMED_ORIGIN
    if configured and is_url(configured):
        return configured, NAMED_CONFIGURED
    return str(git_dir.parent if git_dir.name == ".git" else git_dir), NAMED_PATH


def _name_of(spec: str, configured: str | None) -> tuple[str, str]:
    """The recorded name of the upstream `spec` (a URL, 'embedded' or a local path) whose objects are read
    from a mirror: a path is named as `canonical_name` names it, never by itself when a URL is known."""
    if spec == EMBEDDED:
        return EMBEDDED, NAMED_EMBEDDED
    if is_url(spec):
        return spec, NAMED_URL
    path = Path(spec).expanduser()
    with contextlib.suppress(git.InvalidGitRepositoryError, git.NoSuchPathError):
        with git.Repo(path) as repo:
            return canonical_name(Path(repo.git_dir), configured)
    if configured and is_url(configured):
        return configured, NAMED_CONFIGURED
    return str(path.resolve()), NAMED_PATH


def url_layout(url: str) -> str | None:
    """The layout a URL's repository name promises (…/ggml → ggml, …/llama.cpp → llama.cpp), else None."""
    name = re.split(r"[/:]", url.rstrip("/"))[-1].removesuffix(".git").lower()
    return {"ggml": ggml_facts.LAYOUT_GGML, "llama.cpp": ggml_facts.LAYOUT_LLAMA_CPP}.get(name)


def check_recorded(source: Source, snapshot: Snapshot) -> None:
    """Refuse (UpstreamError, exit 3) a lock that would name a URL which cannot have the pinned commit: a
    ggml URL paired with a llama.cpp commit or the reverse (a local clone without an origin falling back
    to the configured URL of the other repository). An origin URL is the clone's own and is trusted."""
    if source.named_by not in (NAMED_URL, NAMED_CONFIGURED):
        return
    promised = url_layout(source.recorded)
    if promised is None or promised == snapshot.layout:
        return
    via = (
        f"{source.path} has no origin URL, so the lock would name the configured upstream"
        if (source.named_by == NAMED_CONFIGURED)
        else "the lock would name"
    )
    raise UpstreamError(
        f"{via} {source.recorded} (a {promised} repository) for the {snapshot.layout} commit "
        f"{snapshot.commit[:12]}, which that URL does not have",
        f"give the clone the URL it came from (git -C {source.path} remote add origin "
        f"https://github.com/ggml-org/{snapshot.layout}), or pass --upstream THAT-URL --mirror {source.path}",
    )


def open_upstream(
    upstream: str, rev: str, *, mirror: Path | None = None, configured: str | None = None, offline: bool = False
) -> tuple[Source, str]:
    """The source holding `rev` and its full commit id.

    `upstream` is a URL, a local path, or "embedded". `mirror`, when given, is a local clone used as the
    object source instead of the network (the lock still says `upstream`). A local path is read like a
    mirror too: the lock records its canonical name (`canonical_name`: its origin URL or the `configured`
    URL), so the committed lock never names a directory of one machine; with a mirror, `upstream` is
    named the same way (a path never stands for itself when a URL is known). `check_recorded` then refuses
    a name that cannot have the commit.

    `offline` (what a plan passes): nothing is fetched or built; a URL whose cache lacks the commit or its
    files, or an embedded miniature not built yet, raises NeedsFetch."""
    validate_rev(rev)
    if mirror is not None:
        src = Source(Path(mirror), upstream)
        src.recorded, src.named_by = _name_of(upstream, configured)
        return src, src.resolve(rev)
    if upstream == EMBEDDED:
        built = built_mini_upstream() if offline else materialize_mini_upstream()
        if built is None:
            raise NeedsFetch("build the embedded miniature upstream in the tool's cache")
        src = Source(built[0], EMBEDDED)
        src.named_by = NAMED_EMBEDDED
        return src, src.resolve(rev)
    if is_url(upstream):
        return _open_url(upstream, rev, offline=offline)
    path = Path(upstream).expanduser()
    if not path.exists():
        raise UpstreamError(
            f"upstream {upstream!r} is neither an existing directory nor a git URL",
            "pass --upstream https://github.com/ggml-org/ggml, a local clone path, or 'embedded'",
        )
    src = Source(path.resolve(), str(path.resolve()))
    src.recorded, src.named_by = canonical_name(src.git_dir, configured)
    return src, src.resolve(rev)
