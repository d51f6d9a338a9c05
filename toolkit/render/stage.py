"""Render a package's templates into its source tree, build/<name>/src/ (build.toml, torch-ext/, csrc/):
deterministic bytes, never tracked, checkable for reproducibility.

Convention (shared by every template author and every package alike):

* A package's source tree is kernel-builder's: ``build.toml``, ``torch-ext/**`` and ``csrc/**``. Each
  ``<templates>/build.toml.j2``, ``<templates>/torch-ext/**/*.j2`` and ``<templates>/csrc/**/*.j2`` renders to the
  same relative path under build/<name>/src/ minus ``.j2``; a path segment ``__module__`` becomes the Python
  module name (``Config.module``). Everything else in the templates directory is the package's data, read by
  the stages that need it (facts.py, reference.py, conformance.py, card/ for publish).
* What every package carries identically is the tool's (``toolkit/data/package``: ``registration.h``,
  ``_ops.py``), rendered into each package's tree as if it were the package's own (a package's template of the
  same path takes its place); jinja includes shared by every package are ``ggml/<name>``
  (``toolkit/data/partials``: the build.toml sections of Metal and ROCm, the CUDA and Metal runtime shims).
* ``csrc/<backend>/**`` renders only when that backend is enabled in ``config.backends`` (``csrc/cuda`` is
  also used by ``rocm``, which hipifies the same sources).
* Jinja runs with ``StrictUndefined``, ``keep_trailing_newline`` and no autoescape; output is UTF-8 with
  ``\\n`` line ends. Every generated file must contain :data:`GENERATED_MARKER` (templates put
  ``{{ notice }}`` in their first comment), which is how render finds generated files it no longer
  produces (orphans).

Template context (``build_context``), the keys every template sees:

=======================  =================================================================================
``config``               the :class:`toolkit.core.config.Config` (``.name``, ``.module``, ``.version``, ``.ops``...)
``name``, ``module``     kernel name (dash-case) and Python module name
``version``, ``license`` ``upstream``, ``hub_repo``: straight from ``[tool.ggml-vendor]``
``build_edition``        the build.toml edition rendered (``build_edition.BUILD_EDITION``: the newest that the
                         packages' ``kernels_minver`` client reads; a test or the Nix stage may ask for another)
``kernels_minver``       the oldest kernels client the packages load under (``build_edition.KERNELS_MINVER``)
``kernel_selector``      ``kernel_selector("cuda")`` -> the ``[kernel.*]`` line naming what it builds in that
                         edition: ``backend = "cuda"`` (5) or ``language = "cpp-cuda"`` (6)
``upstream_is_git_url``  whether ``upstream`` may go into build.toml's ``general.upstream``
``backends``             enabled backends, config order (subset of cuda, metal, rocm)
``cuda_archs``           CUDA capabilities compiled into CUDA variants (kernel-builder syntax)
``cuda_flags``           nvcc flags for the CUDA translation units (``ggml_facts.CUDA_FLAGS``)
``facts``                the package's facts over ggml's (:class:`toolkit.core.package_facts.Facts`): its
                         templates' facts.py first (op facts), then :mod:`toolkit.core.ggml_facts`
``package``              the :class:`toolkit.core.config.Package` rendered (``.name``, ``.module``, ``.root``...)
``packages``             every package of the project, config order (a card or README may list the family)
``lock``                 the parsed vendor/UPSTREAM (:class:`toolkit.core.lock.Lock`) or ``None`` before sync
``upstream_commit``      ``lock.commit`` or ``""``
``upstream_line``        ``lock.provenance_line()``: which repository the commit is in (ggml or llama.cpp) and
                         the twin commit when upstream records it; ``""`` before sync
``ops``                  op name -> backend -> tuple of entry paths (standalone-ggml layout), resolved
                         against the lock when there is one (first existing alternative), else the first
                         alternative of each config entry
``vendor_dir``           the vendored ggml tree relative to the package's source tree, POSIX:
                         ``"../../../vendor/ggml"`` (build/<name>/src/ to vendor/ggml)
``vendor_includes``      ``ggml_facts.INCLUDE_ROOTS`` under ``vendor_dir``
``cuda_units``           our CUDA translation units, from the package facts' ``CUDA_TU_FOR_OP`` (keyed by op)
                         and ``CUDA_OWN_UNITS`` (keyed ``shim``, ``prep``, ...; none when absent): each
                         a dict with ``kernel`` (build.toml section), ``name``, ``path`` (the .cu), ``entry``
                         and ``include`` (the upstream file it includes, and its #include spelling), ``src``,
                         ``include_dirs``, ``comment``
``ops_name_placeholder`` ``"@OPS_NAME@"``: the token in torch-ext/<module>/_ops.py that the build replaces
                         with the variant id ``_<module>_<backend>_<uid>`` (see :data:`OPS_NAME_PLACEHOLDER`)
``notice``               the one-line "generated, do not edit" text (put it in a comment)
``template``             this template's path relative to templates/ (differs per file)
=======================  =================================================================================
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import jinja2

from toolkit.core import build_edition, ggml_facts, package_facts
from toolkit.core.config import Config
from toolkit.core.errors import Interrupted, RenderError, VendorStateError
from toolkit.core.fs import atomic_write
from toolkit.core.lock import Lock, read_lock

GENERATED_MARKER = "Generated by `ggml-vendor render`"
# kernel-builder's own token in _ops.py.in; the build substitutes the variant id for every occurrence.
OPS_NAME_PLACEHOLDER = ggml_facts.OPS_NAME_PLACEHOLDER
MODULE_SEGMENT = "__module__"
TEMPLATE_SUFFIX = ".j2"
# What a package's source tree holds (kernel-builder's layout): the templates under these render, nothing else.
SOURCE_TEMPLATES = ("build.toml.j2", "torch-ext", "csrc")
# templates/csrc/<dir> renders only when one of these backends is enabled.
BACKEND_DIRS = {"cuda": ("cuda", "rocm"), "metal": ("metal",), "rocm": ("rocm",)}
# Top-level outputs scanned for orphans (generated files that no template produces any more).
OUTPUT_ROOTS = ("torch-ext", "csrc")
_GIT_URL = re.compile(r"^((https?|git|ssh|git\+ssh|git\+https?)://\S+|[\w.-]+@[\w.-]+:\S+)$")


@dataclass(frozen=True)
class RenderedFile:
    """One output: `path` relative to the project root (POSIX), produced from `template` (relative to
    templates/)."""

    path: str
    template: str
    content: str


@dataclass(frozen=True)
class FileChange:
    """A difference between the plan and the tree: `kind` is "stale" (content differs), "missing" or
    "orphan" (a generated file no template produces any more)."""

    path: str
    kind: str


@dataclass(frozen=True)
class RenderPlan:
    root: Path  # the package's source tree, build/<name>/src/
    files: tuple[RenderedFile, ...]
    orphans: tuple[str, ...] = field(default=())
    lock: Lock | None = None  # what was rendered from (a second render for the reproducibility check reuses it)
    edition: int = build_edition.BUILD_EDITION

    def by_path(self) -> dict[str, RenderedFile]:
        return {f.path: f for f in self.files}


# ---- context ----------------------------------------------------------------------------------------------


def _resolved_entries(config: Config, lock: Lock | None) -> dict[str, dict[str, tuple[str, ...]]]:
    ops: dict[str, dict[str, tuple[str, ...]]] = {}
    for op in config.ops:
        per_backend: dict[str, tuple[str, ...]] = {}
        for backend, entries in op.entries.items():
            locked = lock.entries.get(config.lock_key(op.name), {}).get(backend) if lock is not None else None
            if locked:
                per_backend[backend] = tuple(locked)
            else:
                per_backend[backend] = tuple(e.alternatives[0] for e in entries)
        ops[op.name] = per_backend
    return ops


def include_spelling(path: str) -> str:
    """How a translation unit #includes a vendored file: relative to the first include root containing it
    (ggml's own CMake roots, ggml_facts.INCLUDE_ROOTS), e.g. src/ggml-cuda/x.cu -> ggml-cuda/x.cu."""
    for root in sorted(ggml_facts.INCLUDE_ROOTS, key=len):
        prefix = root.rstrip("/") + "/"
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def _cuda_units(
    facts: package_facts.Facts, ops: dict[str, dict[str, tuple[str, ...]]], vendor_includes: list[str]
) -> dict[str, dict[str, Any]]:
    units: dict[str, dict[str, Any]] = {}
    # The header of extern "C" launchers the package's units share, when it has one (its facts say where).
    header = facts.own.get("CUDA_LAUNCHERS_HEADER")
    launchers = [header] if header else []
    for op_name, tu in facts.own.get("CUDA_TU_FOR_OP", {}).items():
        entries = ops.get(op_name, {}).get("cuda")
        if not entries:
            raise RenderError(
                f"config has no CUDA entry for op {op_name!r} but the cuda backend is enabled",
                f'add [tool.ggml-vendor.ops.{op_name}] cuda = ["src/ggml-cuda/..."] or drop cuda from backends',
            )
        if len(entries) != 1:
            raise RenderError(
                f"op {op_name!r} lists {len(entries)} CUDA entry files; the CUDA binding includes exactly one",
                f"keep one cuda entry for {op_name} in pyproject.toml",
            )
        path = f"csrc/cuda/{tu}.cu"
        units[op_name] = {
            "kernel": f"{op_name}_cuda",
            "name": tu,
            "path": path,
            "entry": entries[0],
            "include": include_spelling(entries[0]),
            "src": [path, *launchers],
            "include_dirs": vendor_includes,
            "comment": f"{op_name}: includes {entries[0]} exactly once",
        }
    # Our own units: no upstream entry; ggml's common.cuh for the CUDA/HIP mapping and its helpers.
    for key, name, kernel, uses_launchers, comment in facts.own.get("CUDA_OWN_UNITS", ()):
        path = f"csrc/cuda/{name}.cu"
        units[key] = {
            "kernel": kernel,
            "name": name,
            "path": path,
            "entry": "",
            "include": "ggml-cuda/common.cuh",
            "src": [path, *launchers] if uses_launchers else [path],
            "include_dirs": vendor_includes,
            "comment": comment,
        }
    return units


def build_context(config: Config, lock: Lock | None, edition: int = build_edition.BUILD_EDITION) -> dict[str, Any]:
    """Everything a template may use (documented in this module's docstring)."""
    vendored = config.vendor_dir / ggml_facts.VENDOR_SUBDIR
    vendor_dir = Path(os.path.relpath(vendored, config.package_root)).as_posix()
    vendor_includes = [f"{vendor_dir}/{root}" for root in ggml_facts.INCLUDE_ROOTS if "metal" not in root]
    ops = _resolved_entries(config, lock)
    facts = package_facts.of(config)
    needs_cuda_units = "cuda" in config.backends or "rocm" in config.backends
    return {
        "config": config,
        "package": config.package,
        "packages": config.packages or (config.package,),
        "name": config.name,
        "module": config.module,
        "version": config.version,
        "license": config.license,
        "upstream": config.upstream,
        "build_edition": edition,
        "kernels_minver": build_edition.KERNELS_MINVER,
        "kernel_selector": lambda backend: build_edition.kernel_selector(backend, edition),
        "upstream_is_git_url": bool(_GIT_URL.match(config.upstream)),
        "hub_repo": config.hub_repo,
        "backends": tuple(config.backends),
        "cuda_archs": tuple(config.cuda_archs),
        "cuda_flags": tuple(ggml_facts.CUDA_FLAGS),
        "facts": facts,
        "lock": lock,
        "upstream_commit": lock.commit if lock is not None else "",
        "upstream_line": lock.provenance_line() if lock is not None else "",
        "ops": ops,
        "vendor_dir": vendor_dir,
        "vendor_includes": vendor_includes,
        "cuda_units": _cuda_units(facts, ops, vendor_includes) if needs_cuda_units else {},
        "ops_name_placeholder": OPS_NAME_PLACEHOLDER,
    }


# ---- plan -------------------------------------------------------------------------------------------------


def _wanted(template: PurePosixPath, backends: tuple[str, ...]) -> bool:
    parts = template.parts
    if parts[0] not in SOURCE_TEMPLATES or (parts[0] == "build.toml.j2") != (len(parts) == 1):
        return False
    if len(parts) > 2 and parts[0] == "csrc":
        users = BACKEND_DIRS.get(parts[1], (parts[1],))
        return any(b in backends for b in users)
    return True


def output_path(template: str, module: str) -> str:
    """Where templates/<template> renders: minus .j2, `__module__` segments -> the module name."""
    rel = PurePosixPath(template)
    parts = [module if p == MODULE_SEGMENT else p for p in rel.parts]
    parts[-1] = parts[-1][: -len(TEMPLATE_SUFFIX)]
    return str(PurePosixPath(*parts))


DATA = Path(__file__).resolve().parents[1] / "data"
SHARED_PARTIALS = DATA / "partials"
# The templates every package renders alike (registration.h, _ops.py): the tool's, as kernel-builder's own.
SHARED_TEMPLATES = DATA / "package"
SHARED_TEMPLATES_NAME = "toolkit/data/package"


def template_environment(templates_dir: Path, **syntax: object) -> jinja2.Environment:
    """The jinja2 environment of every generated file: undefined names are errors, bytes are kept as written.
    `syntax` changes delimiters and whitespace handling (the CI workflow's `<< >>`, whose own ${{ }} stays)."""
    return jinja2.Environment(
        # A package's own templates, plus what holds for every ggml-derived package (toolkit/data/partials,
        # included as "ggml/<name>"), so no package keeps its own copy of ggml's runtime shim.
        loader=jinja2.ChoiceLoader(
            [
                jinja2.FileSystemLoader(str(templates_dir)),
                jinja2.FileSystemLoader(str(SHARED_TEMPLATES)),
                jinja2.PrefixLoader({"ggml": jinja2.FileSystemLoader(str(SHARED_PARTIALS))}),
            ]
        ),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        **syntax,  # type: ignore[arg-type]
    )


def _notice(template: str, templates: str) -> str:
    return (
        f"{GENERATED_MARKER} from {templates}/{template}. Do not edit: change the template or "
        "pyproject.toml and re-run `ggml-vendor render`."
    )


def _orphans(root: Path, produced: set[str]) -> tuple[str, ...]:
    found = []
    for top in OUTPUT_ROOTS:
        base = root / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if not path.is_file() or rel in produced or "__pycache__" in path.parts:
                continue
            try:
                head = path.read_bytes()[:4096]
            except OSError:
                continue
            if GENERATED_MARKER.encode() in head:
                found.append(rel)
    return tuple(found)


def templates_of(templates_dir: Path) -> dict[str, str]:
    """Every source template a package renders -> the directory it is read from (shown in its notice): the
    package's own, then the tool's shared ones it does not replace."""
    found: dict[str, str] = {}
    for base, shown in ((templates_dir, ""), (SHARED_TEMPLATES, SHARED_TEMPLATES_NAME)):
        for path in sorted(base.rglob(f"*{TEMPLATE_SUFFIX}")):
            found.setdefault(path.relative_to(base).as_posix(), shown)
    return dict(sorted(found.items()))


def _render_one(env: jinja2.Environment, name: str, context: dict[str, Any], notice: str) -> str:
    try:
        text = env.get_template(name).render(**context, notice=notice, template=name)
    except jinja2.TemplateError as exc:
        where = f"{getattr(exc, 'filename', None) or name}"
        lineno = getattr(exc, "lineno", None)
        raise RenderError(
            f"template {where}{f':{lineno}' if lineno else ''} failed to render: {exc}",
            "fix the template (every name it uses must be in the context documented in toolkit/render/stage.py)",
        ) from None
    if GENERATED_MARKER not in text:
        raise RenderError(
            f"template {name} renders no '{GENERATED_MARKER}' notice",
            "put {{ notice }} in the first comment of the template",
        )
    return text


def render_files(config: Config, lock: Lock | None, edition: int) -> tuple[RenderedFile, ...]:
    """Every file of the package's source tree, rendered in memory from a fresh environment and context."""
    templates_dir = config.templates_dir
    if not templates_dir.is_dir():
        raise RenderError(f"no templates directory at {templates_dir}", f"restore {config.package.templates}/ from git")
    context = build_context(config, lock, edition)
    env = template_environment(templates_dir)
    files: list[RenderedFile] = []
    for name, shown in templates_of(templates_dir).items():
        if not _wanted(PurePosixPath(name), context["backends"]):
            continue
        text = _render_one(env, name, context, _notice(name, shown or config.package.templates))
        files.append(RenderedFile(path=output_path(name, config.module), template=name, content=text))
    _validate_build_toml(files, edition)
    return tuple(files)


def plan(
    config: Config,
    lock: Lock | None = None,
    *,
    read_vendor_lock: bool = True,
    edition: int = build_edition.BUILD_EDITION,
) -> RenderPlan:
    """Render every template in memory (nothing is written). Raises RenderError naming the template.
    `edition` is build.toml's (the packages' own by default; the rendered files are always that one)."""
    if lock is None and read_vendor_lock:
        try:
            lock = read_lock(config.vendor_dir)
        except VendorStateError as exc:
            raise RenderError(exc.message, exc.remedy) from None
    files = render_files(config, lock, edition)
    produced = {f.path for f in files}
    root = config.package_root
    return RenderPlan(root=root, files=files, orphans=_orphans(root, produced), lock=lock, edition=edition)


def unreproducible(config: Config, render_plan: RenderPlan) -> list[FileChange]:
    """Render the package a second time, from scratch, and name every file whose bytes differ from the first
    render (kind "unreproducible"), or that only one of the two renders produced: generated files must be the
    same bytes from the same inputs."""
    again = {f.path: f.content for f in render_files(config, render_plan.lock, render_plan.edition)}
    first = render_plan.by_path()
    return [
        FileChange(path, "unreproducible")
        for path in sorted(set(first) | set(again))
        if path not in first or path not in again or first[path].content != again[path]
    ]


def _validate_build_toml(files: list[RenderedFile], edition: int) -> None:
    """Parse the rendered build.toml with kernels' own parser (the one kernel-builder uses), where the installed
    client reads that edition (kernels 0.17.2 refuses edition 6: kernel-builder then validates it)."""
    rendered = next((f for f in files if f.path == "build.toml"), None)
    if rendered is None:
        return
    try:
        from toolkit.core.kernels_client import kernels_type, open_build

        kernels_type("Build")
        installed = importlib.metadata.version("kernels")
    except (ImportError, importlib.metadata.PackageNotFoundError):  # pragma: no cover - a hard dependency
        return
    if build_edition.edition_for(installed) < edition:
        return
    with tempfile.TemporaryDirectory(prefix="ggml-vendor-build-toml-") as tmp:
        Path(tmp, "build.toml").write_text(rendered.content, encoding="utf-8")
        try:
            open_build(tmp)
        except Exception as exc:  # kernels raises its own exception types from Rust
            raise RenderError(
                f"rendered build.toml is rejected by kernels' parser: {exc}",
                f"fix the package's {rendered.template} (or the partial it includes)",
            ) from None


# ---- check / write ----------------------------------------------------------------------------------------


def check(render_plan: RenderPlan) -> list[FileChange]:
    """What differs between the plan and the tree (empty when everything is up to date)."""
    drift: list[FileChange] = []
    for f in render_plan.files:
        target = render_plan.root / f.path
        if not target.is_file():
            drift.append(FileChange(f.path, "missing"))
        elif target.read_bytes() != f.content.encode("utf-8"):
            drift.append(FileChange(f.path, "stale"))
    drift.extend(FileChange(p, "orphan") for p in render_plan.orphans)
    return drift


def read_back(render_plan: RenderPlan, planned: tuple[FileChange, ...], again: str) -> Interrupted:
    """The one line for a Ctrl-C of a command writing `render_plan` (`planned`: what differed when it was
    planned): which generated files are as rendered now, read back from disk. Each file is written whole
    (atomically), so a file is either the old one or the new one."""
    left = check(render_plan)
    if not left:
        return Interrupted(
            "every generated file is as rendered (read back from disk): it had completed", "nothing to undo"
        )
    names = ", ".join(c.path for c in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
    if {(c.path, c.kind) for c in left} == {(c.path, c.kind) for c in planned}:
        return Interrupted(f"nothing was written: {names} still differ (read back from disk)", f"run {again} again")
    return Interrupted(
        f"{len(planned) - len(left)} of {len(planned)} generated file(s) written; {names} still differ "
        "(read back from disk; each file is whole, old or new)",
        f"run {again} again",
    )


def write(render_plan: RenderPlan) -> list[FileChange]:
    """Bring the tree in line with the plan: write stale/missing files (each atomically), delete orphans.
    Returns what was changed."""
    changes = check(render_plan)
    by_path = render_plan.by_path()
    for change in changes:
        target = render_plan.root / change.path
        if change.kind == "orphan":
            target.unlink(missing_ok=True)
        else:
            atomic_write(target, by_path[change.path].content.encode("utf-8"))
    return changes
