"""Running git on a bare object store: the one environment (no prompts, no system config, no ext:: or fd::
transports) and the one way to call it, shared by the upstream's opening (upstream.py), its reading
(git_source.py) and outdated's survey."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from toolkit.core.errors import UpstreamError

SHA_RE = re.compile(r"^[0-9a-f]{4,64}$")
# A plain ref name: no leading dash (option injection), no revision syntax (~ ^ : @{ ..), no spaces.
REF_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]*$")
URL_RE = re.compile(r"^(https?|ssh|git|file)://[^\s]+$|^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$")
MODE_LINK = 0o120000
MODE_GITLINK = 0o160000
REMOTE = "origin"


class NeedsFetch(Exception):  # noqa: N818 - a signal to the planner, not an error the user sees
    """Planning offline needs objects that are not local yet: `what` is the fetch (a URL into the tool's
    cache, or building the embedded miniature there) that the plan lists as its first step."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def git_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GIT_TERMINAL_PROMPT"] = "0"  # never hang on a credential prompt; fail instead
    env.setdefault("GIT_ASKPASS", "true")
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def run_git(git_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # protocol.ext.allow=never: a configured URL can never run a command (ext:: transport).
    cmd = ["git", "-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never", f"--git-dir={git_dir}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=git_env(), check=False)
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return proc


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def validate_rev(rev: str) -> str:
    """`rev` if it is a plain branch/tag name or a hex commit id; UpstreamError otherwise."""
    bad = (
        not rev
        or len(rev) > 200
        or not REF_RE.fullmatch(rev)
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
    return bool(URL_RE.match(spec))
