"""Reads the rendered project that a build consumes: build.toml (validated by the `kernels` package's own
parser), the Python package under torch-ext/<module>/, the vendor lock, and the source identity (the hash of
every input file) that names the build's op namespace.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit

from toolkit import __version__
from toolkit.core import build_edition, fs
from toolkit.core.config import Config
from toolkit.core.errors import BuildError
from toolkit.core.hashing import sha256_bytes, sha256_file, tree_digest

DEFAULT_PYEXT = ("py", "pyi")
# Files that make up the vendored upstream and our patches: hashed into the source identity so an edited
# vendored file changes the namespace and misses the cache even when the lock did not change. In a family,
# a package hashes only its part of them (VendorView).
VENDOR_GLOBS = ("vendor/ggml/**/*", "vendor/patches/*", "vendor/UPSTREAM")
SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".c", ".mm", ".m", ".metal")
HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".inc")
REGISTRATION = "torch-ext/registration.h"  # rendered into every package's tree (toolkit/data/package)


@dataclass(frozen=True)
class KernelSection:
    """One `[kernel.<name>]` table of build.toml, as the executor needs it."""

    name: str
    backend: str
    depends: tuple[str, ...]
    src: tuple[str, ...]
    include: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    cuda_flags: tuple[str, ...] = ()
    hip_flags: tuple[str, ...] = ()
    cuda_capabilities: tuple[str, ...] = ()
    rocm_archs: tuple[str, ...] = ()

    @property
    def torch_dependent(self) -> bool:
        return "torch" in self.depends


@dataclass(frozen=True)
class ProjectInputs:
    """Everything the plan reads from the rendered project (no file access after this point)."""

    root: Path
    name: str  # kernel name (dash-case)
    module: str  # python module (underscored)
    version: int
    license: str
    upstream: str | None
    backends: tuple[str, ...]  # build.toml general.backends
    torch_src: tuple[str, ...]
    torch_include: tuple[str, ...]
    torch_cxx_flags: tuple[str, ...]
    kernels: tuple[KernelSection, ...]
    python_files: tuple[str, ...]  # relative to torch-ext/<module>/
    source_id: str  # sha256 over every build input file; the op id's uid is its first 7 hex digits
    tool_version: str = __version__
    # Where variants land, relative to the project root (`home`): build/<package>/<variant>/.
    out_base: str = "build"
    home: Path | None = None  # the project root (`root` is the package's rendered source, build/<name>/src)

    @property
    def project_root(self) -> Path:
        return self.home if self.home is not None else self.root

    @property
    def uid(self) -> str:
        return self.source_id[:7]

    def ops_id(self, backend: str) -> str:
        """`_<module>_<backend>_<uid>` (docs/hub-contract.md §2.5): op namespace = .so stem = metadata id."""
        return f"_{self.module}_{backend}_{self.uid}"

    def sections(self, backend: str) -> tuple[KernelSection, ...]:
        return tuple(k for k in self.kernels if k.backend == backend)


@dataclass(frozen=True)
class VendorView:
    """What of the shared vendor/ one package's source identity hashes: the vendored files its closure needs
    (and the always-shipped ones), the patches that change them, and its view of the lock (lock.package_view)
    in place of the family's vendor/UPSTREAM. So adding or re-syncing another package's ops leaves a package's
    uid alone, and a package of a family gets the uid a project of that package alone with the same pin gets."""

    rel: str  # vendor/ relative to the package's source tree: "../../../vendor" from build/<name>/src
    files: frozenset[str]  # vendored paths (standalone layout, relative to vendor/ggml)
    foreign_patches: frozenset[str]  # patch files that change only other packages' files
    lock_sha256: str  # sha256 of the rendered view of the lock

    def foreign(self, rel: str) -> bool:
        """A path (relative to the package root) under vendor/ that belongs to other packages only."""
        ggml, patches = f"{self.rel}/ggml/", f"{self.rel}/patches/"
        if rel.startswith(ggml):
            return rel[len(ggml) :] not in self.files
        return rel.startswith(patches) and rel[len(patches) :] in self.foreign_patches


def vendor_view(cfg: Config, root: Path) -> VendorView | None:
    """The package's view of vendor/ (None: no readable lock of a family, and every vendored file counts)."""
    from toolkit.core import ggml_facts, package_facts
    from toolkit.core.errors import VendorStateError
    from toolkit.core.lock import package_view, read_lock, render_lock

    try:
        lock = read_lock(cfg.vendor_dir)
    except VendorStateError:
        return None  # sync reports a broken lock; the identity then hashes the files as they are
    if lock is None:
        return None
    names = [f.name for f in ggml_facts.FINGERPRINTS] + [f.name for f in package_facts.of(cfg).fingerprints]
    view = package_view(lock, cfg.package.name, names)
    kept = {p.name for p in view.patches}
    return VendorView(
        Path(os.path.relpath(cfg.vendor_dir, root)).as_posix(),
        frozenset(view.files),
        frozenset(p.name for p in lock.patches if p.name not in kept),
        sha256_bytes(render_lock(view).encode()),
    )


def _tuple(table: dict[str, Any], key: str) -> tuple[str, ...]:
    value = table.get(key, [])
    return tuple(str(v) for v in value)


def validate_build_toml(root: Path, memo: Path | None, *, store: bool = True) -> None:
    """kernels' Build.open on the rendered build.toml; remembered per content hash because importing
    `kernels` costs half a second (a no-op build must stay fast). `store=False` reads the memo, never writes it."""
    text = (root / "build.toml").read_bytes()
    digest = hashlib.sha256(text).hexdigest()
    if memo is not None:
        try:
            if digest in json.loads(memo.read_text()):
                return
        except (OSError, ValueError):
            pass
    from toolkit.core.kernels_client import open_build  # deferred: heavy import

    try:
        open_build(str(root))
    except Exception as exc:
        raise BuildError(
            f"build.toml is rejected by kernels' parser: {exc}", "re-run `ggml-vendor render` (or fix build.toml)"
        ) from None
    if memo is not None and store:
        remember_validated(root, memo)


def remember_validated(root: Path, memo: Path) -> None:
    """Record that this build.toml content passed kernels' parser (the build's execute step: plans write
    nothing)."""
    digest = hashlib.sha256((root / "build.toml").read_bytes()).hexdigest()
    try:
        seen = json.loads(memo.read_text())
    except (OSError, ValueError):
        seen = []
    if digest in seen:
        return
    fs.atomic_write(memo, json.dumps(sorted(set(seen) | {digest})[-64:]).encode())


def _kernel_sections(doc: dict[str, Any]) -> tuple[KernelSection, ...]:
    out = []
    for name, t in (doc.get("kernel") or {}).items():
        out.append(
            KernelSection(
                name=name,
                backend=build_edition.backend_of(t),  # `backend` (edition 5) or `language` (6)
                depends=_tuple(t, "depends"),
                src=_tuple(t, "src"),
                include=_tuple(t, "include"),
                cxx_flags=_tuple(t, "cxx-flags"),
                cuda_flags=_tuple(t, "cuda-flags"),
                hip_flags=_tuple(t, "hip-flags"),
                cuda_capabilities=_tuple(t, "cuda-capabilities"),
                rocm_archs=_tuple(t, "rocm-archs"),
            )
        )
    return tuple(out)


def python_files(root: Path, module: str, pyext: tuple[str, ...]) -> tuple[str, ...]:
    base = root / "torch-ext" / module
    if not (base / "__init__.py").is_file():
        raise BuildError(f"torch-ext/{module}/__init__.py is missing", "run `ggml-vendor render`")
    exts = set(DEFAULT_PYEXT) | set(pyext)
    found = []
    for p in sorted(base.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix.lstrip(".") in exts:
            found.append(p.relative_to(base).as_posix())
    return tuple(found)


def _include_files(root: Path, inputs: ProjectInputs) -> set[str]:
    files: set[str] = set()
    for sec in inputs.kernels:
        files.update(sec.src)
        for inc in sec.include:
            d = root / inc
            if d.is_dir():
                for p in d.rglob("*"):
                    if p.is_file() and p.suffix in SOURCE_SUFFIXES + HEADER_SUFFIXES:
                        files.add(p.relative_to(root).as_posix())
    for inc in inputs.torch_include:
        d = root / inc
        if d.is_dir():
            files.update(
                p.relative_to(root).as_posix() for p in d.glob("*") if p.is_file() and p.suffix in HEADER_SUFFIXES
            )
    return files


def source_files(root: Path, inputs: ProjectInputs, view: VendorView | None = None) -> list[str]:
    """Every file whose content defines the build: build.toml, sources listed in it, files in the kernel
    include dirs that are sources or headers, the Python package, and the vendor tree (with `view`: the
    package's part of it)."""
    files = {"build.toml", *inputs.torch_src} | _include_files(root, inputs)
    files.update(f"torch-ext/{inputs.module}/{f}" for f in inputs.python_files)
    globs = VENDOR_GLOBS if view is None else tuple(g.replace("vendor/", f"{view.rel}/", 1) for g in VENDOR_GLOBS)
    for pattern in globs:
        files.update(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())
    files.add(REGISTRATION)
    # the stable-ABI twin of each binding source (toolkit.build.binding_link.stable_source), where the render wrote one
    for src in inputs.torch_src:
        stem, dot, ext = src.rpartition(".")
        if dot and (root / f"{stem}_stable.{ext}").is_file():
            files.add(f"{stem}_stable.{ext}")
    return sorted(f for f in files if view is None or not view.foreign(f))


def source_identity(root: Path, files: list[str], view: VendorView | None = None) -> str:
    """The tree hash (core.hashing.tree_digest) of the build's input files, in the order given."""
    lock_rel = f"{view.rel}/UPSTREAM" if view is not None else None

    def digest(rel: str) -> str:
        p = root / rel
        if not p.is_file():
            raise BuildError(f"build input {rel} does not exist", "run `ggml-vendor render` (and `sync`)")
        return view.lock_sha256 if view is not None and rel == lock_rel else sha256_file(p)

    return tree_digest((rel, digest(rel)) for rel in files)


def load_project(
    cfg: Config, *, memo: Path | None = None, tool_version: str = __version__, store: bool = True
) -> ProjectInputs:
    root = cfg.package_root  # the package's rendered source tree, build/<name>/src
    for rel in ("build.toml", REGISTRATION, f"torch-ext/{cfg.module}/_ops.py"):
        if not (root / rel).is_file():  # every package's render writes all three (toolkit/data/package)
            raise BuildError(f"{root / rel} does not exist", f"run `ggml-vendor render -p {cfg.name}` first")
    path = root / "build.toml"
    validate_build_toml(root, memo, store=store)
    doc = tomlkit.parse(path.read_text()).unwrap()
    general = doc.get("general", {})
    torch = doc.get("torch")
    if torch is None:
        raise BuildError("build.toml has no [torch] section", "an AOT torch extension needs [torch] src = [...]")
    name = str(general.get("name", cfg.name))
    if name != cfg.name:
        raise BuildError(
            f"build.toml names the kernel {name!r} but pyproject.toml says {cfg.name!r}", "re-run `ggml-vendor render`"
        )
    module = cfg.module
    proj = ProjectInputs(
        root=root,
        name=name,
        module=module,
        version=int(general.get("version", cfg.version)),
        license=str(general.get("license", cfg.license)),
        upstream=general.get("upstream", cfg.upstream),
        backends=_tuple(general, "backends"),
        torch_src=_tuple(torch, "src"),
        torch_include=_tuple(torch, "include"),
        torch_cxx_flags=_tuple(torch, "cxx-flags"),
        kernels=_kernel_sections(doc),
        python_files=python_files(root, module, _tuple(torch, "pyext")),
        source_id="0" * 64,
        tool_version=tool_version,
        out_base=cfg.build_dir.relative_to(cfg.root).as_posix(),
        home=cfg.root,
    )
    from dataclasses import replace

    view = vendor_view(cfg, root)
    return replace(proj, source_id=source_identity(root, source_files(root, proj, view), view))


# --- provenance ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Provenance:
    upstream_url: str | None
    upstream_commit: str | None
    layout: str | None
    patches: tuple[tuple[str, str], ...]  # (name, sha256) in application order
    lock_sha256: str | None
    kernel_commit: str | None  # this repository's HEAD
    kernel_dirty: bool
    vendor_dirty: bool | None  # vendored files differ from the lock (None: no lock to compare with)


def _git(root: Path, *args: str) -> str | None:
    # GIT_OPTIONAL_LOCKS=0: `git status` must not refresh .git/index while it only reads (plans write nothing).
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def read_provenance(root: Path) -> Provenance:
    """Upstream pin from vendor/UPSTREAM (toolkit.core.lock), vendor/ against it (toolkit.sync.vendor_tree), and this
    repository's HEAD and dirty state (kernel-builder's `kernel` provenance)."""
    from toolkit.core.errors import VendorStateError
    from toolkit.core.lock import read_lock
    from toolkit.sync.vendor_tree import check_vendor_dir

    vendor = root / "vendor"
    try:
        lock = read_lock(vendor)
    except VendorStateError as exc:
        raise BuildError(f"cannot read the vendor lock: {exc.message}", exc.remedy) from None
    head = None
    dirty = False
    if _git(root, "rev-parse", "--is-inside-work-tree") == "true":
        head = _git(root, "rev-parse", "HEAD")
        # kernel-builder's notion: tracked files changed (untracked files do not count).
        dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no", "--", "."))
    lock_file = vendor / "UPSTREAM"
    return Provenance(
        upstream_url=lock.upstream if lock else None,
        upstream_commit=lock.commit if lock else None,
        layout=lock.layout if lock else None,
        patches=tuple((p.name, p.sha256) for p in lock.patches) if lock else (),
        lock_sha256=sha256_file(lock_file) if lock_file.is_file() else None,
        kernel_commit=head if head and len(head) in (40, 64) else None,
        kernel_dirty=dirty,
        vendor_dirty=bool(check_vendor_dir(vendor, lock)) if lock else None,
    )
