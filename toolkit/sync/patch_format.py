"""A patch in `git format-patch` form, written by git itself from two trees (the pristine vendored files and
the edited ones), with the description as its message."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from toolkit.core.errors import PatchError
from toolkit.sync.patches import lay_files


def git_identity(root: Path) -> tuple[str, str]:
    def get(key: str) -> str:
        r = subprocess.run(["git", "-C", str(root), "config", key], capture_output=True, text=True, check=False)
        return r.stdout.strip()

    return get("user.name") or "ggml-vendor", get("user.email") or "ggml-vendor@localhost"


def format_patch(
    before: Mapping[str, bytes], after: Mapping[str, bytes], message: str, *, author: tuple[str, str]
) -> bytes:
    """`git format-patch` of the change `before` -> `after` (paths relative to vendor/ggml), with `message`
    (first line the subject) as the commit message. Made in a private temporary repository."""
    with tempfile.TemporaryDirectory(prefix="ggml-vendor-save-") as tmp:
        work = Path(tmp) / "ggml"
        work.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(
            GIT_CEILING_DIRECTORIES=tmp,
            GIT_CONFIG_NOSYSTEM="1",
            HOME=tmp,
            GIT_AUTHOR_NAME=author[0],
            GIT_AUTHOR_EMAIL=author[1],
            GIT_COMMITTER_NAME=author[0],
            GIT_COMMITTER_EMAIL=author[1],
        )

        def git(*args: str) -> bytes:
            # bytes, never text: a CRLF or binary edit must reach the patch exactly as it is
            r = subprocess.run(["git", *args], cwd=work, env=env, capture_output=True, check=False)
            if r.returncode != 0:
                detail = r.stderr.decode("utf-8", "replace").strip()
                raise PatchError(f"git {args[0]} failed while writing the patch: {detail}", None)
            return r.stdout

        def lay(files: Mapping[str, bytes]) -> None:
            lay_files(work, {*before, *after}, files)

        git("init", "-q")
        git("config", "core.autocrlf", "false")
        lay(before)
        git("add", "-A")
        git("commit", "-q", "--allow-empty", "-m", "pinned upstream")
        lay(after)
        git("add", "-A")
        (Path(tmp) / "msg").write_text(message.strip() + "\n")
        git("commit", "-q", "-F", str(Path(tmp) / "msg"))
        # --binary: an edit git sees as binary is kept as a binary diff (applies exactly), not "Binary files differ"
        return git(
            "-c",
            "core.autocrlf=false",
            "format-patch",
            "-1",
            "--stdout",
            "--binary",
            "--no-signature",
            "--zero-commit",
            "--no-renames",
        )
