"""The publish plan: what a push would add, delete and leave unchanged on each branch, decided by content
hashes against the live tree. Pure: inputs are file listings, the output a printable value.

Deletion rule (kernel-builder's upload.rs): on a branch that already exists only files under the variants
being uploaded are deleted, so per-platform builders can publish independently; a brand-new branch starts
from `main`, so anything under build/ or benchmarks/ that it inherited and that is not being uploaded goes.

Beside the variants, the branch carries the package's rendered source (build.toml, torch-ext/, csrc/ at the top,
as in a kernel-builder repository), so what was built can be reviewed on the Hub; a source file no longer rendered
is deleted from the branch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.core.config import Config
from toolkit.core.hashing import git_blob_id, sha256_bytes
from toolkit.core.records import fields_json, json_list

ADD, DELETE, UNCHANGED = "add", "delete", "unchanged"
CARD_PATH = "README.md"
# The rendered source tree on the branch (kernel-builder's layout): what publish keeps in step with build/<name>/src.
SOURCE_PREFIXES = ("build.toml", "csrc/", "torch-ext/")


@dataclass(frozen=True)
class LocalFile:
    path_in_repo: str
    local: str  # absolute path on disk ("" for generated content such as the card)
    size: int
    sha256: str
    git_blob: str


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    blob_id: str
    sha256: str | None  # LFS oid; None for a plain git blob


@dataclass(frozen=True)
class FileAction:
    path: str
    action: str
    size: int
    sha256: str = ""


@dataclass(frozen=True)
class BranchPlan:
    branch: str
    exists: bool
    actions: tuple[FileAction, ...]

    def of(self, kind: str) -> tuple[FileAction, ...]:
        return tuple(a for a in self.actions if a.action == kind)

    @property
    def changes(self) -> tuple[FileAction, ...]:
        return tuple(a for a in self.actions if a.action != UNCHANGED)

    def to_json(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "exists": self.exists,
            **{k: [a.path for a in self.of(k)] for k in (ADD, DELETE, UNCHANGED)},
        }


@dataclass(frozen=True)
class PublishPlan:
    repo_id: str
    target: str  # "hub" or the git remote
    version: int
    variants: tuple[str, ...]
    branches: tuple[BranchPlan, ...]
    local: dict[str, LocalFile] = field(default_factory=dict)  # path_in_repo -> file (for execution)
    card_text: str = ""  # README.md content for main (generated, so it has no file on disk)

    def to_json(self) -> dict[str, Any]:
        return fields_json(self, "repo_id target version variants branches", variants=list, branches=json_list)

    def lines(self) -> list[str]:
        out = [f"publish {self.repo_id} ({self.target}), version {self.version}: {', '.join(self.variants)}"]
        for b in self.branches:
            state = "existing" if b.exists else "new"
            out.append(
                f"  branch {b.branch} ({state}): {len(b.of(ADD))} to add, {len(b.of(DELETE))} to delete, "
                f"{len(b.of(UNCHANGED))} unchanged"
            )
            for a in b.actions:
                if a.action != UNCHANGED:
                    out.append(
                        f"    {'+' if a.action == ADD else '-'} {a.path}"
                        + (f" ({a.size} B)" if a.action == ADD else "")
                    )
        return out


def _file_digests(path: Path) -> tuple[int, str, str]:
    """(size, sha256, git blob id) of a file in one streamed read: variant binaries are large."""
    size = path.stat().st_size
    sha, blob = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
            blob.update(chunk)
    return size, sha.hexdigest(), blob.hexdigest()


def collect_variant_files(build_dir: Path, variants: Iterable[str]) -> list[LocalFile]:
    """Every file of every variant as build/<variant>/<rel>, bytecode skipped (kernels never downloads it)."""
    out = []
    for v in variants:
        base = build_dir / v
        for f in sorted(p for p in base.rglob("*") if p.is_file()):
            rel = f.relative_to(base).as_posix()
            if "__pycache__" in rel.split("/") or rel.endswith(".pyc"):
                continue
            out.append(LocalFile(f"build/{v}/{rel}", str(f), *_file_digests(f)))
    return out


def collect_source_files(cfg: Any) -> list[LocalFile]:
    """The package's rendered source, build/<name>/src/, as it goes on the branch; refused unless it is what
    render makes of the templates now (what was built is what is shown)."""
    from toolkit import render
    from toolkit.core.errors import PublishError

    rendered = render.plan(cfg)
    if rendered.drift:
        names = ", ".join(rendered.shown(d.path) for d in rendered.drift[:3])
        raise PublishError(
            f"refusing to publish, nothing was pushed: the rendered source is not current ({names})",
            f"run `ggml-vendor render -p {cfg.name}` (and build again if it changed), then publish",
        )
    return [
        LocalFile(f.path, str(rendered.root / f.path), *_file_digests(rendered.root / f.path)) for f in rendered.files
    ]


def card_file(text: str) -> LocalFile:
    data = text.encode()
    return LocalFile(CARD_PATH, "", len(data), sha256_bytes(data), git_blob_id(data))


def same_content(local: LocalFile, remote: RemoteFile) -> bool:
    if remote.sha256:
        return remote.sha256 == local.sha256 and remote.size == local.size
    return remote.blob_id == local.git_blob


def plan_branch(
    branch: str,
    local: list[LocalFile],
    remote: dict[str, RemoteFile] | None,
    variants: Iterable[str],
    *,
    prune_prefixes: tuple[str, ...] = ("build/", "benchmarks/"),
    base_for_new: dict[str, RemoteFile] | None = None,
    source_prefixes: tuple[str, ...] = (),
) -> BranchPlan:
    """Actions for one branch. `remote` is the branch's live tree (None: the branch does not exist yet and
    will be created from `base_for_new`, e.g. main). Files under `source_prefixes` not in `local` go too."""
    exists = remote is not None
    tree = remote if remote is not None else (base_for_new or {})
    actions: list[FileAction] = []
    wanted = {f.path_in_repo: f for f in local}
    for path, f in sorted(wanted.items()):
        r = tree.get(path)
        actions.append(FileAction(path, UNCHANGED if r is not None and same_content(f, r) else ADD, f.size, f.sha256))
    stale = (tuple(f"build/{v}/" for v in variants) if exists else prune_prefixes) + source_prefixes
    for path, r in sorted(tree.items()):
        if stale and path not in wanted and path.startswith(stale):
            actions.append(FileAction(path, DELETE, r.size, r.sha256 or ""))
    return BranchPlan(branch, exists, tuple(actions))


def make_plan(
    *,
    repo_id: str,
    target: str,
    version: int,
    branch: str,
    variants: list[str],
    files: list[LocalFile],
    card_text: str | None,
    remote_branch: dict[str, RemoteFile] | None,
    remote_main: dict[str, RemoteFile] | None,
    source: list[LocalFile] | None = None,
) -> PublishPlan:
    """The whole publish: variants (and, given `source`, the rendered source beside them) to `branch`, the card
    to main."""
    card = card_file(card_text) if card_text is not None else None
    files = [*files, *(source or ())]
    prefixes = SOURCE_PREFIXES if source else ()
    branches = [plan_branch(branch, files, remote_branch, variants, base_for_new=remote_main, source_prefixes=prefixes)]
    if card is not None:
        branches.append(plan_branch("main", [card], remote_main, (), prune_prefixes=()))
    local = {f.path_in_repo: f for f in files}
    if card is not None:
        local[card.path_in_repo] = card
    return PublishPlan(repo_id, target, version, tuple(variants), tuple(branches), local, card_text or "")


def plan_publish(
    cfg: Config,
    ready: Any,
    *,
    repo_id: str,
    target: str,
    remote_branch: dict[str, RemoteFile] | None,
    remote_main: dict[str, RemoteFile] | None,
) -> PublishPlan:
    """The plan of either transport: the preflighted variants (a preflight.Ready) to branch v<N>, their card
    to main, against the remote trees read by the caller."""
    from toolkit.publish.card import render_card

    names = [d.name for d in ready.variant_dirs]
    return make_plan(
        repo_id=repo_id,
        target=target,
        version=ready.version,
        branch=f"v{ready.version}",
        variants=names,
        files=collect_variant_files(ready.variant_dirs[0].parent, names),
        card_text=render_card(cfg, repo_id, list(ready.variant_dirs), ready.lock, ready.conformance),
        remote_branch=remote_branch,
        remote_main=remote_main,
        source=collect_source_files(cfg),
    )


def batches(actions: tuple[FileAction, ...], size: int) -> list[tuple[FileAction, ...]]:
    """Changes in commit-sized groups; a variant's files stay together where they fit (paths are sorted)."""
    changes = [a for a in actions if a.action != UNCHANGED]
    return [tuple(changes[i : i + size]) for i in range(0, len(changes), size)] if changes else []
