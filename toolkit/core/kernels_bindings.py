"""The one door to kernels' compiled data types (Build, Metadata, Digest, Version, ...), whichever module holds
them in the installed release.

kernels <= 0.17 ships them as the private `kernels._rust`; kernels 0.18 (which transformers 5.23+ require)
renames it `kernels._data`; the public `kernels-data` package carries a subset (no `Build` in 0.16). Every
parser or validator of the toolkit that calls kernels' own types goes through `kernels_type` so that a rename
upstream is one line here, not an ImportError in render, build, verify and collect.
"""

from __future__ import annotations

import importlib
from typing import Any

# Most specific first: the module bundled with the installed kernels client (what loads the kernel at run
# time) before the separately released public package, which may lag behind it.
MODULES = ("kernels._data", "kernels._rust", "kernels_data")


class KernelsBindingError(ImportError):
    """None of the modules that carry kernels' data types offers the one asked for."""


def kernels_types(*names: str) -> tuple[Any, ...]:
    """kernels' compiled types `names` (e.g. "Digest", "DigestAlgorithm"), all from the first of MODULES that
    defines every one of them: types that work together (an enum and the class taking it) must not mix
    modules."""
    tried: list[str] = []
    for module_name in MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            tried.append(f"{module_name} (not installed)")
            continue
        missing = [n for n in names if getattr(module, n, None) is None]
        if not missing:
            return tuple(getattr(module, n) for n in names)
        tried.append(f"{module_name} (has no {', '.join(missing)})")
    raise KernelsBindingError(
        f"kernels' {', '.join(names)} not importable: tried {'; '.join(tried)} — "
        "install the kernels version pyproject.toml pins"
    )


def kernels_type(name: str) -> Any:
    """kernels' compiled type `name` (e.g. "Build", "Metadata")."""
    return kernels_types(name)[0]
