"""The one door to the installed `kernels` client, for every release we support (pyproject's `kernels` range).

Everything else in the tool uses kernels' public names (`kernels.__all__`: get_kernel, get_local_kernel, ...).
What the public API does not offer goes through here, and only here:

- kernels' compiled data types (Build, Metadata, Digest, Version, ...): the private `kernels._rust`, which every
  release from 0.17 to 0.19 ships under that name (a `_data` rename seen on a development branch never reached
  a release);
- the variant-name parser and the resolver against this machine: `kernels.variants` up to 0.18,
  `kernels._internals.variants` from 0.19 (which also changed the parsed shape: `ArchVariant.arch.{backend,os}`
  became `.framework/.backend/.python/.system`). `parse_variant` returns our own `ParsedVariant`, the same on
  every release, so callers never see either shape.

A move upstream is then one edit here, not an ImportError in render, build, verify and collect.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

DATA_MODULE = "kernels._rust"
# The variant parser's module, newest layout first.
VARIANT_MODULES = ("kernels._internals.variants", "kernels.variants")

# The oldest kernels client every package we build is tested to load under (CI's oldest stack, .ci/stacks.toml):
# metadata.json's `kernels-minver`. Clients from 0.18 refuse a variant whose minver is newer than themselves, so
# raising it drops users; it moves only with the oldest stack CI runs.
KERNELS_MINVER = "0.17.2"

_BACKENDS = ("cuda", "rocm", "metal", "cpu", "xpu", "cann", "neuron", "tpu")


class KernelsBindingError(ImportError):
    """The installed kernels does not offer what the tool needs from it."""


def kernels_types(*names: str) -> tuple[Any, ...]:
    """kernels' compiled types `names` (e.g. "Digest", "DigestAlgorithm"), from the module every release ships."""
    try:
        module = importlib.import_module(DATA_MODULE)
    except ImportError as exc:
        raise KernelsBindingError(
            f"kernels' {', '.join(names)} not importable ({DATA_MODULE}: {exc}) — "
            "install a kernels release in the range pyproject.toml declares"
        ) from None
    missing = [n for n in names if getattr(module, n, None) is None]
    if missing:
        raise KernelsBindingError(
            f"kernels {client_version()} has no {', '.join(missing)} in {DATA_MODULE} — "
            "install a kernels release in the range pyproject.toml declares"
        )
    return tuple(getattr(module, n) for n in names)


def kernels_type(name: str) -> Any:
    """kernels' compiled type `name` (e.g. "Build", "Metadata")."""
    return kernels_types(name)[0]


# What kernels 0.18+ print (from Rust, straight to file descriptor 2) for every edition-5 build.toml they open.
# We render the edition the oldest supported client reads (docs/hub-contract.md §1), so the notice is expected
# and carries nothing for our users; any other text the parser prints is passed on.
EDITION_NOTICE = "uses the edition 5 format; upgrading to edition 6 in memory"


def open_build(directory: str) -> Any:
    """kernels' Build.open(directory) (its build.toml parser: raises on a file it rejects), with the parser's
    expected edition notice kept off the terminal. The parser writes to the process's stderr descriptor, below
    Python's sys.stderr, so the descriptor itself is redirected for the call."""
    import os
    import sys
    import tempfile

    Build = kernels_type("Build")
    with tempfile.TemporaryFile() as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            return Build.open(directory)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            printed = sink.read().decode(errors="replace")
            other = [ln for ln in printed.splitlines() if ln.strip() and EDITION_NOTICE not in ln]
            if other:
                print("\n".join(other), file=sys.stderr)


def client_version() -> str:
    """The installed kernels release ("0.19.1"), or "not installed"."""
    try:
        import kernels
    except ImportError:
        return "not installed"
    return str(getattr(kernels, "__version__", "unknown"))


def _variants_module() -> ModuleType:
    errors = []
    for name in VARIANT_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise KernelsBindingError(f"kernels' variant parser not importable ({'; '.join(errors)})")


@dataclass(frozen=True)
class ParsedVariant:
    """A variant name as the installed client reads it."""

    name: str
    is_arch: bool  # a compiled (arch) variant, as opposed to a noarch one
    framework: str  # "torch", "torch-stable-abi", "tvm-ffi", or the noarch framework ("torch", "mlx")
    backend: str  # normalised: cuda, rocm, metal, cpu, xpu, ...
    os: str | None  # linux / darwin / windows for arch variants
    framework_version: str | None = None  # "2.14" for torch214 / torch-2.14
    backend_version: str | None = None  # "13.0" for cu130 / cuda-13.0; None for Metal, CPU and noarch


def _version(obj: object) -> str | None:
    v = getattr(obj, "version", None)
    return None if v is None else str(v)


def normalise_backend(text: str) -> str:
    s = text.lower()
    for b in _BACKENDS:
        if s.startswith(b) or (b == "cuda" and s.startswith("cu")):
            return b
    return s


def _framework_name(framework: object) -> str:
    kind = type(framework).__name__
    return {"TorchStableAbi": "torch-stable-abi", "TvmFfi": "tvm-ffi", "MlxNoarch": "mlx"}.get(kind, "torch")


def _backend_name(backend: object) -> str:
    name = getattr(backend, "name", None)
    return normalise_backend(str(name if name is not None else getattr(backend, "variant_str", backend)))


def parse_variant(name: str) -> ParsedVariant:
    """The installed client's reading of a variant name; ValueError when it does not parse. A name the client
    reads as noarch with an odd backend (0.17/0.18 read 0.19's new grammar that way) comes back as noarch."""
    kv = _variants_module()
    v = kv.parse_variant(name)
    if type(v).__name__ == "ArchVariant":
        # 0.17 / 0.18: framework + arch{backend, platform, os}; 0.19: framework + backend + python + system
        backend, os = (v.arch.backend, v.arch.os) if hasattr(v, "arch") else (v.backend, v.system.os)
        fw = v.framework
        return ParsedVariant(
            name, True, _framework_name(fw), _backend_name(backend), os, _version(fw), _version(backend)
        )
    if type(v).__name__ == "NoarchVariant":
        backend = v.arch if hasattr(v, "arch") else v.backend
        noarch = str(getattr(backend, "backend_name", backend))
        return ParsedVariant(name, False, _framework_name(v.framework), normalise_backend(noarch), None)
    raise ValueError(f"{name!r} is a {type(v).__name__}, not a kernel build variant this tool produces")


def host_accepts(name: str) -> tuple[bool, str]:
    """Whether the installed client would load variant `name` on this machine, and why not (its own trace)."""
    try:
        kv = _variants_module()
    except KernelsBindingError as exc:
        return False, str(exc)
    try:
        parsed = kv.parse_variant(name)
    except ValueError as exc:
        return False, str(exc)
    try:
        chosen, trace = kv.resolve_variant([parsed])
    except Exception as exc:  # backend detection can fail without torch
        return False, f"kernels cannot detect this system: {exc}"
    if chosen is None:
        return False, " ".join(kv.variants_trace_str(trace).split())
    return True, ""


# kernels' curated list of Python dependencies a kernel may declare (metadata.json python-depends): a data file
# beside the client's dependency checker, which 0.19 moved under _internals/.
PYTHON_DEPENDS_FILES = ("_internals/python_depends.json", "python_depends.json")


def curated_python_depends(backend: str) -> set[str]:
    """The dependency names kernels accepts in python-depends for `backend` (general ones included)."""
    import json
    from pathlib import Path

    import kernels

    root = Path(kernels.__file__).parent
    for rel in PYTHON_DEPENDS_FILES:
        if (root / rel).is_file():
            data = json.loads((root / rel).read_text())
            return set(data.get("general", {})) | set(data.get("backends", {}).get(backend, {}))
    raise KernelsBindingError(f"kernels {client_version()} ships none of {', '.join(PYTHON_DEPENDS_FILES)}")


# kernels' layer validator (what `kernelize` runs on a Hub layer before it replaces a module's forward), for the
# conformance tests of our layers against transformers' own hooks.
LAYER_MODULES = ("kernels._internals.layer.layer", "kernels.layer.layer")


def validate_layer(*, check_cls: type, cls: type, repo: Any) -> None:
    """Run the installed client's own layer check (raises what it raises)."""
    for name in LAYER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module._validate_layer(check_cls=check_cls, cls=cls, repo=repo)
        return
    raise KernelsBindingError(f"kernels {client_version()} has no layer validator in {' or '.join(LAYER_MODULES)}")


def list_variants_argv(repo_id: str) -> list[str]:
    """Arguments of kernels' own console script that list every version's build variants of `repo_id`:
    `kernels variants --all-versions` from 0.18 (where `kernels versions` is deprecated, removed in 0.20),
    `kernels versions` before."""
    from packaging.version import Version

    if Version(client_version()) >= Version("0.18"):
        return ["variants", repo_id, "--all-versions"]
    return ["versions", repo_id]
