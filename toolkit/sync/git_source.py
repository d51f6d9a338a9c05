"""Reading the upstream at a commit straight from the git object store: `Source` (an opened repository, its
history and the fetches a plan names) and `Snapshot` (one commit's files, in the standalone-ggml layout;
llama.cpp's `ggml/` prefix added here, and nothing read that would leave the ggml tree). Nothing checks out
a tree. upstream.py opens a Source."""

from __future__ import annotations

import contextlib
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

import git
from git.objects.fun import tree_entries_from_data

from toolkit.core import ggml_facts
from toolkit.core.errors import UpstreamError
from toolkit.sync.git_run import MODE_GITLINK, MODE_LINK, REMOTE, NeedsFetch, last_line, run_git, validate_rev

# How a Source's `recorded` name was chosen (Source.named_by).
NAMED_URL, NAMED_ORIGIN, NAMED_CONFIGURED, NAMED_PATH, NAMED_EMBEDDED = (
    "url",
    "origin",
    "configured",
    "path",
    "embedded",
)


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
            if entry is None or entry[0] != MODE_GITLINK and entry[0] & 0o170000 != 0o040000:
                return None
            if entry[0] == MODE_GITLINK:
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
                if mode == MODE_GITLINK:
                    raise UpstreamError(
                        f"{repo_path} is a git submodule at {self.commit[:12]}; it has no file content",
                        "remove it from the op's entries in pyproject.toml",
                    )
                if mode & 0o170000 == 0o040000:
                    break  # a directory, not a file
                if mode != MODE_LINK:
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
        # An explicit GIT_DIR, as in run_git: the clone may belong to another user (a shared read-only
        # mirror) and we only read objects from it, never run its hooks or touch a work tree.
        self.repo.git.update_environment(GIT_DIR=str(self.git_dir), GIT_CONFIG_NOSYSTEM="1")

    def close(self) -> None:
        self.repo.close()

    def _missing_of(self, commit: str) -> set[str]:
        """The objects of `commit` a filtered cache lacks (rev-list --missing=print: reads, never fetches)."""
        if commit not in self._missing:
            proc = run_git(self.git_dir, "rev-list", "--objects", "--missing=print", commit, check=False)
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
            proc = run_git(
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
                REMOTE,
                *wanted,
                check=False,
            )
            if proc.returncode != 0:
                raise UpstreamError(
                    f"cannot fetch files from {self.url}: {last_line(proc.stderr)}",
                    "check the network, or sync from a local clone with --mirror PATH",
                )
            missing.difference_update(wanted)

    def resolve(self, rev: str) -> str:
        """Full commit id of `rev` (validated first); UpstreamError when unknown."""
        validate_rev(rev)
        proc = run_git(
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
        return run_git(self.git_dir, "cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0

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
        proc = run_git(self.git_dir, "log", "--format=%H%x09%s", f"{old}..{new}", "--", *paths, check=False)
        if proc.returncode != 0:
            return None
        return [tuple(ln.split("\t", 1)) for ln in proc.stdout.splitlines() if "\t" in ln]  # type: ignore[misc]

    def log_function(self, old: str, new: str, repo_path: str, function: str) -> list[tuple[str, str]] | None:
        """Commits in old..new that changed the definition of `function` in `repo_path` (git log -L), newest
        first; None when history is not here or git cannot find the function at `new`."""
        if self.is_shallow() or not (self.has_commit(old) and self.has_commit(new)):
            return None
        proc = run_git(
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
