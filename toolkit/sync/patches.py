"""Our local patches (vendor/patches/*.patch) applied in name order on the pristine extraction, with a verdict
per patch: applied, already upstream (the reverse applies: offer to drop it), or conflict (stop, naming the
hunk; nothing is changed).

Patches are unified diffs with paths relative to vendor/ggml (`a/src/ggml-cuda/x.cu`, as `git diff` or
`diff -ru` write them) or to the project root (`a/vendor/ggml/src/...`); both are recognised. They are
applied with `git apply` in a private temporary directory holding only the files they touch, so the
result is known in memory before anything in vendor/ is written.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from toolkit.core.errors import PatchError
from toolkit.core.hashing import sha256_bytes
from toolkit.core.lock import VERDICT_APPLIED, VERDICT_CONFLICT, VERDICT_UPSTREAM

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_FAILED_RE = re.compile(r"patch failed: (.+):(\d+)")


@dataclass(frozen=True)
class PatchResult:
    name: str
    sha256: str
    verdict: str  # VERDICT_APPLIED, VERDICT_UPSTREAM (or VERDICT_CONFLICT in a PatchError's report)
    files: tuple[str, ...]  # paths it touches, relative to vendor/ggml
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "files": list(self.files)}  # the record, its tuple as a JSON list


def _strip(path: str, n: int) -> str:
    return "/".join(path.split("/")[n:])


def patch_targets(text: str) -> tuple[int, list[tuple[str | None, str | None]]]:
    """(strip level for git apply -p, [(old path, new path)] relative to vendor/ggml; None = /dev/null)."""
    raw: list[tuple[str | None, str | None]] = []
    old: str | None = None
    for section in _sections(text):
        binary = _binary_target(section)
        if binary is not None:
            raw.append(binary)
            continue
        for line in section:
            if line.startswith("--- "):
                old = line[4:].split("\t")[0].strip()
            elif line.startswith("+++ ") and old is not None:
                new = line[4:].split("\t")[0].strip()
                raw.append((None if old == "/dev/null" else old, None if new == "/dev/null" else new))
                old = None
    names = [p for pair in raw for p in pair if p]
    level = 1 if names and all(p.startswith(("a/", "b/")) for p in names) else 0
    if names and all(_strip(p, level).startswith("vendor/ggml/") for p in names):
        level += 2
    return level, [(_strip(o, level) if o else None, _strip(n, level) if n else None) for o, n in raw]


def _sections(text: str) -> list[list[str]]:
    """The patch's lines cut at each `diff --git` header (the text before the first is one section too)."""
    sections: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("diff --git "):
            sections.append([])
        sections[-1].append(line)
    return sections


_GIT_HEADER_RE = re.compile(r"^diff --git (\S+) (\S+)$")


def _binary_target(section: list[str]) -> tuple[str | None, str | None] | None:
    """(old, new) of a `git diff --binary` section (it has no ---/+++ lines); None for any other section."""
    if not section or not any(ln == "GIT binary patch" for ln in section):
        return None
    if any(ln.startswith(("--- ", "+++ ")) for ln in section):
        return None
    m = _GIT_HEADER_RE.match(section[0])
    if not m:
        return None
    old, new = m.group(1), m.group(2)
    if any(ln.startswith("new file mode") for ln in section):
        return None, new
    if any(ln.startswith("deleted file mode") for ln in section):
        return old, None
    return old, new


def _hunks_of(text: str, level: int, path: str) -> list[str]:
    """The @@ headers of `path`'s hunks, in order."""
    hunks: list[str] = []
    current = None
    for line in text.splitlines():
        if line.startswith("+++ "):
            target = line[4:].split("\t")[0].strip()
            current = _strip(target, level) if target != "/dev/null" else None
        elif line.startswith("--- /dev/null"):
            continue
        elif current == path and _HUNK_RE.match(line):
            hunks.append(line.split(" @@")[0] + " @@")
    return hunks


def lay_files(work: Path, paths: Iterable[str], files: Mapping[str, bytes]) -> None:
    """Make `work/<path>` hold files[path] for each of `paths`, or not exist where `files` lacks it."""
    for path in paths:
        target = work / path
        if path in files:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(files[path])
        elif target.exists():
            target.unlink()


def _git_apply(workdir: Path, level: int, patch: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    # Never let git discover the project repository around the temp dir: paths must stay relative here.
    env["GIT_CEILING_DIRECTORIES"] = str(workdir.parent)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return subprocess.run(
        ["git", "apply", f"-p{level}", "--whitespace=nowarn", *extra, str(patch)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _conflict(name: str, text: str, level: int, stderr: str) -> PatchError:
    m = _FAILED_RE.search(stderr)
    if m:
        path, line = m.group(1), int(m.group(2))
        hunks = _hunks_of(text, level, path)
        idx = next((i for i, h in enumerate(hunks) if (hm := _HUNK_RE.match(h)) and int(hm.group(1)) == line), None)
        where = f"hunk #{idx + 1} `{hunks[idx]}` of {path}" if idx is not None else f"{path} at line {line}"
    else:
        where = (stderr.strip().splitlines() or ["(no detail from git apply)"])[0].removeprefix("error: ")
    err = PatchError(
        f"patch {name} conflicts: {where} does not apply at the new pin; vendor/ was not changed",
        f"refresh vendor/patches/{name} against the new upstream or remove it, then re-run sync",
    )
    err.where = where  # type: ignore[attr-defined]  # what `patch list` prints: "hunk #N `@@ .. @@` of PATH"
    err.patch = name  # type: ignore[attr-defined]  # which patch, for a caller that words it for its own verb
    return err


def _touched(name: str, targets: list[tuple[str | None, str | None]], files: Mapping[str, bytes]) -> list[str]:
    """The paths patch `name` touches, in order; PatchError for a path outside vendor/ggml or a change to a
    file that is not vendored."""
    for path in (p for pair in targets for p in pair if p):
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or "" in parts:
            raise PatchError(
                f"patch {name} touches {path!r}, which would land outside vendor/ggml",
                f"fix the paths in vendor/patches/{name} (relative to vendor/ggml)",
            )
    touched: list[str] = []
    for old, new in targets:
        for maybe in (old, new):
            if maybe and maybe not in touched:
                touched.append(maybe)
        if old and old not in files:
            raise PatchError(
                f"patch {name} changes {old}, which is not vendored at this pin",
                f"refresh or remove vendor/patches/{name}, then re-run sync",
            )
    return touched


def apply_patches(
    files: Mapping[str, bytes], patches: list[tuple[str, bytes]]
) -> tuple[dict[str, bytes], list[PatchResult]]:
    """Apply `patches` ((name, bytes) in order) to `files` (vendor/ggml-relative path -> bytes).

    Returns the patched files and a verdict per patch. Raises PatchError at the first conflict."""
    result = dict(files)
    verdicts: list[PatchResult] = []
    if not patches:
        return result, verdicts
    with tempfile.TemporaryDirectory(prefix="ggml-vendor-patch-") as tmp:
        work = Path(tmp) / "ggml"
        work.mkdir()
        for name, data in patches:
            text = data.decode("utf-8", "replace")
            level, targets = patch_targets(text)
            if not targets:
                raise PatchError(
                    f"vendor/patches/{name} holds no unified diff",
                    "write it with `git diff` or `diff -ru` (paths relative to vendor/ggml)",
                )
            touched = _touched(name, targets, result)
            # Lay down the current bytes of every file the patch touches (and only those).
            lay_files(work, touched, result)
            patch_file = Path(tmp) / name
            patch_file.write_bytes(data)
            forward = _git_apply(work, level, patch_file, "--check")
            if forward.returncode == 0:
                done = _git_apply(work, level, patch_file)
                if done.returncode != 0:
                    raise _conflict(name, text, level, done.stderr)
                for path in touched:
                    target = work / path
                    if target.is_file():
                        result[path] = target.read_bytes()
                    else:
                        result.pop(path, None)
                verdicts.append(PatchResult(name, sha256_bytes(data), VERDICT_APPLIED, tuple(touched)))
            elif _git_apply(work, level, patch_file, "--check", "--reverse").returncode == 0:
                verdicts.append(
                    PatchResult(
                        name,
                        sha256_bytes(data),
                        VERDICT_UPSTREAM,
                        tuple(touched),
                        "already upstream: drop it (sync --drop-upstreamed)",
                    )
                )
            else:
                raise _conflict(name, text, level, forward.stderr)
    return result, verdicts


def unapply_patches(files: Mapping[str, bytes], patches: list[tuple[str, bytes]]) -> dict[str, bytes]:
    """Take `patches` ((name, bytes) in series order, each applied to `files`) back off, the last first
    (git apply --reverse, all or nothing per patch). PatchError naming the first patch that cannot be taken
    back off: edits in `files` overlap what it changes."""
    result = dict(files)
    if not patches:
        return result
    with tempfile.TemporaryDirectory(prefix="ggml-vendor-patch-") as tmp:
        work = Path(tmp) / "ggml"
        work.mkdir()
        for name, data in reversed(patches):
            level, targets = patch_targets(data.decode("utf-8", "replace"))
            touched = list(dict.fromkeys(p for pair in targets for p in pair if p))
            lay_files(work, touched, result)
            patch_file = Path(tmp) / name
            patch_file.write_bytes(data)
            if _git_apply(work, level, patch_file, "--reverse").returncode != 0:
                raise PatchError(
                    f"the edits in vendor/ggml overlap what the later patch {name} changes, so it cannot be "
                    "taken back off them to refresh the patch before it; nothing was written",
                    f"save those edits into {name} (ggml-vendor patch save {name}), or into a new patch after it",
                )
            for path in touched:
                target = work / path
                if target.is_file():
                    result[path] = target.read_bytes()
                else:
                    result.pop(path, None)
    return result


_SUBJECT_PREFIX_RE = re.compile(r"^\[PATCH[^\]]*\]\s*")


def describe(data: bytes) -> str:
    """A patch's one-line description: the Subject of a `git format-patch` file (folded lines joined,
    `[PATCH]` dropped), else the first non-blank line before the diff; "" when there is none."""
    lines = data.decode("utf-8", "replace").splitlines()
    if lines and lines[0].startswith("From "):  # an mbox header: up to the first blank line
        for i, line in enumerate(lines):
            if not line.strip():
                break
            if line.startswith("Subject:"):
                subject = line[len("Subject:") :]
                for cont in lines[i + 1 :]:
                    if not cont.startswith((" ", "\t")):
                        break
                    subject += " " + cont.strip()
                return _SUBJECT_PREFIX_RE.sub("", subject.strip())
        return ""
    for line in lines:
        if line.startswith(("diff --git ", "--- ", "Index: ")):
            return ""
        if line.strip():
            return line.strip()
    return ""


def message_of(data: bytes) -> str:
    """The whole description of a `git format-patch` file (subject, blank line, body), for a refresh that
    keeps it; "" for a plain diff."""
    text = data.decode("utf-8", "replace")
    subject = describe(data)
    head, sep, _ = text.partition("\n---\n")
    if not subject or not sep:
        return subject
    body_lines = head.split("\n\n", 1)[1:] if "\nSubject:" in head else []
    body = body_lines[0].strip("\n") if body_lines else ""
    return subject + ("\n\n" + body if body else "")


__all__ = [
    "PatchResult",
    "apply_patches",
    "patch_targets",
    "describe",
    "message_of",
    "VERDICT_APPLIED",
    "VERDICT_CONFLICT",
    "VERDICT_UPSTREAM",
]
