"""The embedded default upstream: toolkit/data/mini-upstream (our own miniature ggml) as a git repository.

`materialize_mini_upstream()` turns the shipped files into a one-commit git repository with a fixed
author, committer, date and message, so the commit id depends only on the file contents: the same
toolkit always yields the same pin, and `sync --upstream embedded` works offline.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from toolkit.core import fs, paths
from toolkit.core.errors import UpstreamError
from toolkit.core.hashing import sha256_bytes, tree_digest

EMBEDDED = "embedded"  # the --upstream value (and lock url) that means this miniature
BRANCH = "master"
TAG = "mini-v1"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "ggml-vendor",
    "GIT_AUTHOR_EMAIL": "mini-upstream@ggml-vendor.invalid",
    "GIT_COMMITTER_NAME": "ggml-vendor",
    "GIT_COMMITTER_EMAIL": "mini-upstream@ggml-vendor.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}
_STAGING = ".mini-upstream-"  # a repository being built beside its final place
MESSAGE = "mini-upstream: a miniature ggml written by the ggml-vendor authors"


def source_dir() -> Path:
    """Where the shipped miniature lives (inside the installed package)."""
    return Path(str(resources.files("toolkit") / "data" / "mini-upstream"))


def mini_files() -> dict[str, bytes]:
    """The miniature's files, path (standalone-ggml layout) -> bytes, sorted."""
    base = source_dir()
    files = {}
    for path in sorted(base.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[path.relative_to(base).as_posix()] = path.read_bytes()
    if not files:
        raise UpstreamError(f"the embedded mini-upstream is missing from {base}", "reinstall ggml-vendor")
    return files


def _git(cwd: Path, *args: str, input_: bytes | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(_IDENTITY)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, input=input_, capture_output=True, check=False)
    if proc.returncode != 0:
        raise UpstreamError(
            f"git {' '.join(args[:2])} failed while building the mini-upstream: "
            f"{proc.stderr.decode(errors='replace').strip().splitlines()[-1:]}",
            "check that git is installed and the cache directory is writable",
        )
    return proc.stdout.decode().strip()


def _content_key(files: dict[str, bytes]) -> str:
    """The miniature's cache key: the tree hash (core.hashing.tree_digest) of its files, shortened."""
    return tree_digest((path, sha256_bytes(data)) for path, data in files.items())[:16]


def default_dest() -> Path:
    return paths.cache_root() / "mini-upstream"


def _built(repo: Path, key: str) -> str | None:
    """The commit of a complete miniature repository at `repo` built from `key`, else None."""
    marker = repo / ".git" / "ggml-vendor-commit"
    if not marker.is_file():
        return None
    commit, _, built_from = marker.read_text().strip().partition(" ")
    return commit if len(commit) == 40 and built_from == key else None


@contextlib.contextmanager
def _build_lock(repo: Path) -> Iterator[None]:
    """An flock beside `repo`, so concurrent first uses build it once (the kernel drops it if we die)."""
    fd = os.open(repo.with_name(f".{repo.name}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def built_mini_upstream() -> tuple[Path, str] | None:
    """(repository path, commit) of the default miniature when it is already built; None otherwise. Reads
    only: what a plan may call."""
    files = mini_files()
    key = _content_key(files)
    repo = default_dest() / key
    commit = _built(repo, key)
    return (repo, commit) if commit is not None else None


def materialize_mini_upstream(dest: Path | None = None) -> tuple[Path, str]:
    """A git repository holding the miniature at `dest` (default: <user cache>/mini-upstream/<hash>),
    built once per content. Returns (repository path, full commit id). The commit is deterministic.

    Safe when several processes use it for the first time at once: a complete repository is never
    replaced or deleted (others may be reading it), and it appears in one rename, built beside it under a
    lock, so nobody ever sees half of one."""
    files = mini_files()
    key = _content_key(files)
    repo = Path(dest) if dest is not None else default_dest() / key
    commit = _built(repo, key)
    if commit is not None:
        return repo, commit
    repo.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(repo):
        commit = _built(repo, key)  # another process may have built it while we waited
        if commit is not None:
            return repo, commit
        if repo.exists() and any(repo.iterdir()):
            raise UpstreamError(
                f"{repo} exists and is not a mini-upstream repository", "pass an empty or new directory"
            )
        fs.stale_staging(repo.parent, _STAGING)  # builds a killed run left behind
        tmp = fs.new_staging(repo.parent, _STAGING)
        try:
            commit = _build(tmp, files, key)
            if repo.exists():
                repo.rmdir()  # empty (checked above, under the lock)
            os.rename(tmp, repo)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return repo, commit


def _build(tmp: Path, files: dict[str, bytes], key: str) -> str:
    """The miniature as a one-commit repository in `tmp`, marked complete; returns its commit."""
    _git(tmp, "init", "-q")
    _git(tmp, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
    for path, data in files.items():
        target = tmp / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    _git(tmp, "add", "-A")
    _git(tmp, "commit", "-q", "--no-gpg-sign", "-m", MESSAGE)
    _git(tmp, "tag", TAG)
    commit = _git(tmp, "rev-parse", "HEAD")
    (tmp / ".git" / "ggml-vendor-commit").write_text(f"{commit} {key}\n")
    return commit
