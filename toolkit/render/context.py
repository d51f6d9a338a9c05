"""What every template sees: the context `build_context` gives jinja for one package.

Template context (``build_context``), the keys every template sees:

=======================  =================================================================================
``config``               the :class:`toolkit.core.config.Config` (``.name``, ``.module``, ``.version``, ``.ops``...)
``name``, ``module``     kernel name (dash-case) and Python module name
``version``, ``license`` ``upstream``, ``hub_repo``: straight from ``[tool.ggml-vendor]``
``build_edition``        the build.toml edition rendered (``build_edition.BUILD_EDITION``: the newest that the
                         packages' ``kernels_minver`` client reads; a test or the Nix stage may ask for another)
``kernels_minver``       the oldest kernels client the packages load under (``kernels_client.KERNELS_MINVER``)
``kernel_selector``      ``kernel_selector("cuda")`` -> the ``[kernel.*]`` line naming what it builds in that
                         edition: ``backend = "cuda"`` (5) or ``language = "cpp-cuda"`` (6)
``upstream_is_git_url``  whether ``upstream`` may go into build.toml's ``general.upstream``
``backends``             enabled backends, config order (subset of cuda, metal, rocm)
``cuda_archs``           CUDA capabilities compiled into CUDA variants (kernel-builder syntax)
``cuda_flags``           nvcc flags for the CUDA translation units (``ggml_facts.CUDA_FLAGS``)
``facts``                the package's facts over ggml's (:class:`toolkit.core.package_facts.Facts`): its
                         templates' facts.py first (op facts), then :mod:`toolkit.core.ggml_facts`
``package``              the :class:`toolkit.core.package_table.Package` rendered (``.name``, ``.module``, ``.root``...)
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
                         with the variant id ``_<module>_<backend>_<uid>`` (see :data:`toolkit.render.stage.OPS_NAME_PLACEHOLDER`)
``notice``               the one-line "generated, do not edit" text (put it in a comment)
``template``             this template's path relative to templates/ (differs per file)
=======================  =================================================================================
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from toolkit.core import build_edition, ggml_facts, kernels_client, package_facts
from toolkit.core.config import Config
from toolkit.core.errors import RenderError
from toolkit.core.lock import Lock

_GIT_URL = re.compile(r"^((https?|git|ssh|git\+ssh|git\+https?)://\S+|[\w.-]+@[\w.-]+:\S+)$")


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
        "kernels_minver": kernels_client.KERNELS_MINVER,
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
        "ops_name_placeholder": ggml_facts.OPS_NAME_PLACEHOLDER,
    }
