"""The upstream repository: open a local clone, a URL (shallow, filtered, cached) or the embedded miniature,
resolve a revision safely, and read files at a commit straight from the git object store.

Nothing here checks out a tree. Paths handed to `Snapshot.read` are in the standalone-ggml layout; the
snapshot adds llama.cpp's `ggml/` prefix itself and refuses anything that would leave the ggml tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import git
from git.objects.fun import tree_entries_from_data

from toolkit.core import ggml_facts, paths
from toolkit.core.errors import UpstreamError
from toolkit.sync.embedded import EMBEDDED, built_mini_upstream, materialize_mini_upstream

_SHA_RE = re.compile(r"^[0-9a-f]{4,64}$")
# A plain ref name: no leading dash (option injection), no revision syntax (~ ^ : @{ ..), no spaces.
_REF_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]*$")
_URL_RE = re.compile(r"^(https?|ssh|git|file)://[^\s]+$|^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$")
_MODE_LINK = 0o120000
_MODE_GITLINK = 0o160000
_REMOTE = "origin"


class NeedsFetch(Exception):  # noqa: N818 - a signal to the planner, not an error the user sees
    """Planning offline needs objects that are not local yet: `what` is the fetch (a URL into the tool's
    cache, or building the embedded miniature there) that the plan lists as its first step."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def validate_rev(rev: str) -> str:
    """`rev` if it is a plain branch/tag name or a hex commit id; UpstreamError otherwise."""
    bad = (
        not rev
        or len(rev) > 200
        or not _REF_RE.fullmatch(rev)
        or ".." in rev
        or "//" in rev
        or "/." in rev
        or rev.endswith((".", "/", ".lock"))
    )
    if bad:
        raise UpstreamError(
            f"--rev {rev!r} is not a plain branch, tag or commit id",
            "pass a commit sha (7-40 hex digits), a tag such as v0.21.0 or a branch name",
        )
    return rev


def is_url(spec: str) -> bool:
    return bool(_URL_RE.match(spec))


def cache_root() -> Path:
    return paths.cache_root()


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GIT_TERMINAL_PROMPT"] = "0"  # never hang on a credential prompt; fail instead
    env.setdefault("GIT_ASKPASS", "true")
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def _run_git(git_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # protocol.ext.allow=never: a configured URL can never run a command (ext:: transport).
    cmd = ["git", "-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never", f"--git-dir={git_dir}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_git_env(), check=False)
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return proc


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


@dataclass
class Snapshot:
    """One commit of the upstream, read-only. `read` takes standalone-layout paths."""

    source: Source
    commit: str
    layout: str
    date: str
    subject: str
    _trees: dict[str, dict[str, tuple[int, str]]] = field(default_factory=dict, repr=False)
    _blobs: dict[str, bytes] = field(default_factory=dict, repr=False)

    @property
    def prefix(self) -> str:
        return ggml_facts.LAYOUT_PREFIX[self.layout]

    # -- tree walking (cached per directory) --
    def _entries(self, repo_dir: str) -> dict[str, tuple[int, str]]:
        """name -> (mode, object id) of the tree at `repo_dir`; {} when it is absent or not a directory.

        Read from the raw tree objects: GitPython's tree iteration builds a Submodule object for a gitlink,
        which raises when the commit has no .gitmodules entry for it (llama.cpp has carried submodules)."""
        if repo_dir not in self._trees:
            if not repo_dir:
                sha = self.source.repo.commit(self.commit).tree.hexsha
            else:
                parent, _, name = repo_dir.rpartition("/")
                entry = self._entries(parent).get(name)
                sha = entry[1] if entry is not None and entry[0] & 0o170000 == 0o040000 else ""
            raw = self.source.read_blob(sha) if sha else b""
            self._trees[repo_dir] = {name: (mode, binsha.hex()) for binsha, mode, name in tree_entries_from_data(raw)}
        return self._trees[repo_dir]

    def _lookup(self, repo_path: str) -> tuple[int, str] | None:
        parent, _, name = repo_path.rpartition("/")
        return self._entries(parent).get(name)

    def submodule_above(self, repo_path: str) -> str | None:
        """The repo path of the git submodule `repo_path` lies in (or is), None when it lies in none."""
        parts = repo_path.split("/")
        for i in range(1, len(parts) + 1):
            entry = self._lookup("/".join(parts[:i]))
            if entry is None or entry[0] != _MODE_GITLINK and entry[0] & 0o170000 != 0o040000:
                return None
            if entry[0] == _MODE_GITLINK:
                return "/".join(parts[:i])
        return None

    def _refuse_inside_submodule(self, repo_path: str) -> None:
        sub = self.submodule_above(repo_path)
        if sub is not None:
            raise UpstreamError(
                f"{repo_path} lies inside the git submodule {sub} at {self.commit[:12]}; submodules are not vendored",
                "vendor files of the ggml tree only: patch the #include or fix the op's entries",
            )

    def _resolve(self, path: str, *, root_fallback: bool = False) -> tuple[str, str] | None:
        """(repo path, blob id) of a standalone-layout path, following in-tree symlinks; None if absent."""
        candidates = [self.prefix + path]
        if root_fallback and self.prefix and path in ggml_facts.ROOT_FALLBACK:
            candidates.append(path)
        for repo_path in candidates:
            hops = 0
            while True:
                entry = self._lookup(repo_path)
                if entry is None:
                    self._refuse_inside_submodule(repo_path)
                    break
                mode, sha = entry
                if mode == _MODE_GITLINK:
                    raise UpstreamError(
                        f"{repo_path} is a git submodule at {self.commit[:12]}; it has no file content",
                        "remove it from the op's entries in pyproject.toml",
                    )
                if mode & 0o170000 == 0o040000:
                    break  # a directory, not a file
                if mode != _MODE_LINK:
                    return repo_path, sha
                target = self.source.repo.odb.stream(bytes.fromhex(sha)).read().decode("utf-8", "replace")
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(repo_path), target))
                inside = (
                    resolved
                    if not self.prefix
                    else resolved[len(self.prefix) :]
                    if resolved.startswith(self.prefix)
                    else None
                )
                if target.startswith("/") or resolved.startswith("..") or inside is None or inside.startswith(".."):
                    raise UpstreamError(
                        f"{repo_path} is a symlink to {target!r}, outside the ggml tree at {self.commit[:12]}; "
                        "refusing to vendor it",
                        "vendor a revision without the link, or drop the file from the entries",
                    )
                hops += 1
                if hops > 16:
                    raise UpstreamError(f"{repo_path}: too many levels of symlinks", "fix the upstream tree")
                repo_path = resolved
        return None

    def exists(self, path: str) -> bool:
        return self._resolve(path) is not None

    def blob_id(self, path: str, *, root_fallback: bool = False) -> str | None:
        found = self._resolve(path, root_fallback=root_fallback)
        return found[1] if found else None

    def read(self, path: str, *, root_fallback: bool = False) -> bytes | None:
        """Bytes of a standalone-layout path at this commit, or None when absent."""
        found = self._resolve(path, root_fallback=root_fallback)
        if found is None:
            return None
        sha = found[1]
        if sha not in self._blobs:
            self._blobs[sha] = self.source.read_blob(sha)
        return self._blobs[sha]

    def prefetch(self, paths: list[str]) -> None:
        """Fetch, in one round trip, the blobs of `paths` a filtered URL cache does not hold yet."""
        if not self.source.partial:
            return
        shas = []
        for p in paths:
            # A path the snapshot refuses (a submodule, a link out of the tree) is refused by the read that
            # follows, which names the including file and line.
            with contextlib.suppress(UpstreamError):
                sha = self.blob_id(p)
                if sha:
                    shas.append(sha)
        self.source.fetch_blobs(shas, self.commit)


class Source:
    """A git repository holding upstream objects; `recorded` is what the lock calls it."""

    def __init__(
        self, path: Path, recorded: str, *, partial: bool = False, url: str | None = None, offline: bool = False
    ) -> None:
        self.path = path
        self.recorded = recorded
        self.named_by = NAMED_URL  # how `recorded` was chosen (NAMED_*); open_upstream sets it
        self.partial = partial
        self.url = url
        # offline: never fetch (a plan). A partial cache then refuses to read a blob it lacks (git would
        # fetch it lazily) and raises NeedsFetch instead.
        self.offline = offline
        self._missing: dict[str, set[str]] = {}
        try:
            self.repo = git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise UpstreamError(
                f"{path} is not a git repository",
                "pass --upstream with a git clone (bare or not) of ggml or llama.cpp, or a URL",
            ) from None
        self.git_dir = Path(self.repo.git_dir)
        # An explicit GIT_DIR, as in _run_git: the clone may belong to another user (a shared read-only
        # mirror) and we only read objects from it, never run its hooks or touch a work tree.
        self.repo.git.update_environment(GIT_DIR=str(self.git_dir), GIT_CONFIG_NOSYSTEM="1")

    def close(self) -> None:
        self.repo.close()

    def _missing_of(self, commit: str) -> set[str]:
        """The objects of `commit` a filtered cache lacks (rev-list --missing=print: reads, never fetches)."""
        if commit not in self._missing:
            proc = _run_git(self.git_dir, "rev-list", "--objects", "--missing=print", commit, check=False)
            self._missing[commit] = {ln[1:].split()[0] for ln in proc.stdout.splitlines() if ln.startswith("?")}
        return self._missing[commit]

    def read_blob(self, sha: str) -> bytes:
        if self.partial and self.offline and any(sha in m for m in self._missing.values()):
            raise NeedsFetch(f"fetch the vendored files from {self.url} into the tool's cache")
        try:
            data: bytes = self.repo.odb.stream(bytes.fromhex(sha)).read()
            return data
        except (ValueError, git.BadObject, OSError) as exc:
            raise UpstreamError(
                f"cannot read blob {sha[:12]} from {self.recorded} ({exc})",
                "check the clone, or that the URL is reachable for a filtered cache",
            ) from None

    def fetch_blobs(self, shas: list[str], commit: str) -> None:
        """One fetch for those of `shas` (blobs of `commit`) that the filtered cache does not hold yet."""
        if not shas or not self.url:
            return
        # Which blobs of the commit are absent, without triggering git's one-object-at-a-time lazy fetch.
        missing = self._missing_of(commit)
        wanted = sorted({s for s in shas if s in missing})
        if wanted and self.offline:
            raise NeedsFetch(
                f"fetch {len(wanted)} vendored files of {commit[:12]} from {self.url} into the tool's cache"
            )
        if wanted:
            # noop negotiation, as git's own lazy fetch: announcing the pinned commit as a "have" would make
            # the server assume we hold its blobs and send none of them.
            proc = _run_git(
                self.git_dir,
                "-c",
                "fetch.negotiationAlgorithm=noop",
                "fetch",
                "-q",
                "--no-tags",
                "--no-write-fetch-head",
                "--recurse-submodules=no",
                "--filter=blob:none",
                "--end-of-options",
                _REMOTE,
                *wanted,
                check=False,
            )
            if proc.returncode != 0:
                raise UpstreamError(
                    f"cannot fetch files from {self.url}: {_last_line(proc.stderr)}",
                    "check the network, or sync from a local clone with --mirror PATH",
                )
            missing.difference_update(wanted)

    def resolve(self, rev: str) -> str:
        """Full commit id of `rev` (validated first); UpstreamError when unknown."""
        validate_rev(rev)
        proc = _run_git(
            self.git_dir, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False
        )
        if proc.returncode != 0 or not proc.stdout.strip():
            ambiguous = "ambiguous" in proc.stderr
            raise UpstreamError(
                f"{'ambiguous' if ambiguous else 'unknown'} revision {rev!r} in {self.recorded}",
                "use more hex digits" if ambiguous else "pass an existing branch, tag or commit id (git tag / git log)",
            )
        return proc.stdout.strip()

    def has_commit(self, sha: str) -> bool:
        return _run_git(self.git_dir, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

    def is_shallow(self) -> bool:
        return (self.git_dir / "shallow").exists()

    def snapshot(self, commit: str) -> Snapshot:
        if self.partial and self.offline:
            self._missing_of(commit)  # so that read_blob can refuse what it would fetch lazily
        c = self.repo.commit(commit)
        probe = Snapshot(self, commit, ggml_facts.LAYOUT_GGML, "", "")
        layout = None
        for name, marker in ggml_facts.LAYOUT_MARKERS:
            if probe._lookup(marker) is not None:
                layout = name
                break
        if layout is None:
            markers = " or ".join(m for _, m in ggml_facts.LAYOUT_MARKERS)
            raise UpstreamError(
                f"{self.recorded} at {commit[:12]} is neither llama.cpp nor ggml (no {markers})",
                "point --upstream at a ggml or llama.cpp repository",
            )
        return Snapshot(
            self,
            commit,
            layout,
            c.committed_datetime.isoformat(),
            c.summary if isinstance(c.summary, str) else c.summary.decode("utf-8", "replace"),
        )

    def log(self, old: str, new: str, paths: list[str]) -> list[tuple[str, str]] | None:
        """Commits in old..new touching `paths` (repo paths), newest first; None when history is not here."""
        if self.is_shallow() or not (self.has_commit(old) and self.has_commit(new)):
            return None
        proc = _run_git(self.git_dir, "log", "--format=%H%x09%s", f"{old}..{new}", "--", *paths, check=False)
        if proc.returncode != 0:
            return None
        return [tuple(ln.split("\t", 1)) for ln in proc.stdout.splitlines() if "\t" in ln]  # type: ignore[misc]

    def log_function(self, old: str, new: str, repo_path: str, function: str) -> list[tuple[str, str]] | None:
        """Commits in old..new that changed the definition of `function` in `repo_path` (git log -L), newest
        first; None when history is not here or git cannot find the function at `new`."""
        if self.is_shallow() or not (self.has_commit(old) and self.has_commit(new)):
            return None
        proc = _run_git(
            self.git_dir,
            "log",
            "--no-patch",
            "--format=%x00%H%x09%s",
            f"-L:{re.escape(function)}:{repo_path}",
            f"{old}..{new}",
            check=False,
        )
        if proc.returncode != 0:
            return None
        return [tuple(ln.strip().split("\t", 1)) for ln in proc.stdout.split("\0") if "\t" in ln]  # type: ignore[misc]


def _cache_dir_for(url: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", url).strip("-")[-48:]
    return cache_root() / "upstreams" / f"{slug}-{hashlib.sha1(url.encode()).hexdigest()[:10]}.git"


def _create_cache(url: str, cache: Path) -> None:
    """An empty filtered (blob:none) bare repository for `url` at `cache`, made beside it and renamed into
    place; a concurrent run that made it first wins (its cache is as good as ours)."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(cache.name + f".tmp-{os.getpid()}")
    subprocess.run(["git", "init", "-q", "--bare", str(tmp)], check=True, capture_output=True, env=_git_env())
    for key, value in (
        ("remote.origin.url", url),
        ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
        ("remote.origin.promisor", "true"),
        ("remote.origin.partialclonefilter", "blob:none"),
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", _REMOTE),
    ):
        _run_git(tmp, "config", key, value)
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
            if _SHA_RE.match(rev) and len(rev) < 40
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
    proc = _run_git(
        cache,
        "fetch",
        "-q",
        "--depth=1",
        "--filter=blob:none",
        "--no-tags",
        "--end-of-options",
        _REMOTE,
        rev,
        check=False,
    )
    if proc.returncode != 0:
        raise _fetch_error(url, rev, _last_line(proc.stderr))
    commit = _run_git(cache, "rev-parse", "--verify", "FETCH_HEAD^{commit}").stdout.strip()
    # Keep the pinned commit reachable so `git gc` in the cache never drops it.
    _run_git(cache, "update-ref", f"refs/ggml-vendor/pins/{commit}", commit)
    return src, commit


# How a Source's `recorded` name was chosen (Source.named_by).
NAMED_URL, NAMED_ORIGIN, NAMED_CONFIGURED, NAMED_PATH, NAMED_EMBEDDED = (
    "url",
    "origin",
    "configured",
    "path",
    "embedded",
)


def canonical_name(git_dir: Path, configured: str | None) -> tuple[str, str]:
    """What the lock calls a local clone, and how that was chosen: its origin URL, else the configured URL,
    else the path itself (a machine-specific name, used only when the project's upstream is a path too)."""
    proc = _run_git(git_dir, "config", "--get", "remote.origin.url", check=False)
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
