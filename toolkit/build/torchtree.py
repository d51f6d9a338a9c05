"""Where torch environments live and which torch build a tree holds, read from torch/version.py as text
(importing torch takes seconds): what envs.py discovers and provision.py installs and checks."""

from __future__ import annotations

import os
import re
from pathlib import Path

_VERSION_LINE = re.compile(r"^(?P<key>__version__|cuda|hip)\s*(?::\s*[^=]+)?=\s*(?P<val>.+)$", re.M)


def default_envs_dir() -> Path:
    if os.environ.get("GGML_VENDOR_ENVS"):
        return Path(os.environ["GGML_VENDOR_ENVS"])
    from toolkit.core.paths import user_cache_dir

    return user_cache_dir() / "envs"


def env_dir_name(torch_minor: str, compute: str) -> str:
    return f"torch{torch_minor.replace('.', '')}-{compute}"


def read_torch_version(torch_dir: Path) -> tuple[str, str | None, str | None] | None:
    """(version, cuda, hip) from torch/version.py without importing torch."""
    try:
        text = (torch_dir / "version.py").read_text()
    except OSError:
        return None
    found = {m["key"]: m["val"].strip() for m in _VERSION_LINE.finditer(text)}
    if "__version__" not in found:
        return None

    def unquote(v: str | None) -> str | None:
        return None if v in (None, "None") else v.strip("'\"")

    return unquote(found["__version__"]) or "", unquote(found.get("cuda")), unquote(found.get("hip"))


def _compute_of(cuda: str | None, hip: str | None) -> str:
    if cuda:
        return "cu" + "".join(cuda.split(".")[:2])
    if hip:
        return "rocm" + "".join(hip.split(".")[:2])
    return "cpu"


def torch_build_problem(tree: Path, torch_minor: str, compute: str, version: str = "") -> str:
    """Why the torch under `tree` (a venv or a --target tree) is not the build a row names, or "". The row
    names a torch version (minor, or exact `version`) and a compute tag: the installed build's version,
    its local tag (`+cu130`, when it has one) and torch.version.cuda/hip must all say so. pip picks any
    build that satisfies `torch==2.13.*` (a `+cpu` one from a find-links folder, say), so this is checked."""
    found = sorted(tree.glob("lib/python3*/site-packages/torch/version.py")) + sorted(tree.glob("torch/version.py"))
    got = read_torch_version(found[0].parent) if found else None
    if got is None:
        return "no readable torch/version.py in it"
    ver, cuda, hip = got
    base, _, local = ver.partition("+")
    built_for = _compute_of(cuda, hip)
    if compute == "metal":
        built_for = "metal" if not cuda and not hip else built_for
    wrong_version = (base != version) if version else not base.startswith(f"{torch_minor}.")
    if wrong_version or (local and local != compute) or built_for != compute:
        return f"it holds torch {ver} (built for {built_for}), not torch {version or torch_minor} for {compute}"
    return ""
