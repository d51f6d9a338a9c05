"""Layout and names of a variant (docs/hub-contract.md §2.1, §2.4-2.5): the variant name parses, the required files
exist, and op namespace = `.so` stem = metadata id = `_<module>_<backend>_<uid>` = `PyInit_<id>`."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from toolkit.core.kernels_client import parse_variant
from toolkit.verify.findings import FAIL, PASS, WARN, Finding
from toolkit.verify.objfile import exports_symbol

REQUIRED = ("metadata.json", "__init__.py", "_ops.py")
_UID_RE = r"[A-Za-z0-9_]+"


def variant_backend(name: str) -> tuple[str | None, str | None, bool]:
    """(backend, os, is_arch) from a variant name using the kernels client's own parser; backend None when the
    name does not parse (then `os` holds the parser's message)."""
    try:
        v = parse_variant(name)
    except ValueError as exc:
        return None, str(exc), False
    return v.backend, v.os, v.is_arch


def so_files(path: Path) -> list[Path]:
    return sorted(
        p for p in path.iterdir() if p.is_file() and (p.suffix in (".so", ".pyd") or p.name.endswith(".dylib"))
    )


def _absolute_self_imports(source: str, names: set[str]) -> list[str]:
    """Absolute imports of the kernel itself: they break once the package is loaded under its id."""
    bad = []
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [f"syntax error: {exc}"]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.split(".")[0] in names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in names:
                bad.append(node.module)
    return bad


Problem = tuple[str, str, str]  # (status, what is wrong, what to do)


def check_layout(variant: str, path: Path, meta: dict[str, Any] | None, *, module: str) -> list[Finding]:
    backend, os_or_err, is_arch = variant_backend(variant)
    found = _tree_problems(path, module, None if backend is not None else str(os_or_err))
    mid = ""
    if meta is not None:
        mid = str(meta.get("id", ""))
        found += _id_problems(meta, backend, module)
        found += _binary_problems(path, mid, is_arch)
        found += _python_problems(path, mid, module, is_arch)
    f = [Finding(variant, "layout", status, msg, remedy) for status, msg, remedy in found]
    if meta is not None and not any(x.failed for x in f):
        f.append(
            Finding(
                variant,
                "layout",
                PASS,
                f"names agree: id = op namespace = .so stem = {mid}" if is_arch else "noarch layout ok",
            )
        )
    return f


def _tree_problems(path: Path, module: str, name_error: str | None) -> list[Problem]:
    """The variant name parses; the files kernels needs are there; no bytecode, no nested package."""
    out: list[Problem] = []
    if name_error is not None:
        out.append(
            (
                FAIL,
                f"variant name does not parse: {name_error}",
                "name it torch<MM>-cxx11-<compute>-<cpu>-<os> (docs/hub-contract.md §2.1)",
            )
        )
    for name in REQUIRED:
        if not (path / name).is_file():
            out.append(
                (
                    FAIL,
                    f"{name} is missing",
                    "rebuild the variant (kernels imports __init__.py and reads metadata.json)",
                )
            )
    pyc = [p.relative_to(path).as_posix() for p in path.rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc"]
    if pyc:
        out.append(
            (FAIL, f"bytecode in the variant: {', '.join(pyc[:3])}", "delete __pycache__/ and *.pyc before publishing")
        )
    if (path / module / module).exists():
        out.append((FAIL, f"nested {module}/{module}/ package", "flatten the package (kernel-layout-check)"))
    return out


def _id_problems(meta: dict[str, Any], backend: str | None, module: str) -> list[Problem]:
    """The metadata id is the op namespace _<module>_<backend>_<uid>, for the backend the name says."""
    out: list[Problem] = []
    mid = str(meta.get("id", ""))
    mbackend = str((meta.get("backend") or {}).get("type", "")).lower()
    if backend is not None and mbackend and backend != mbackend:
        out.append(
            (
                FAIL,
                f"variant name says backend {backend} but metadata backend.type is {mbackend}",
                "rebuild: the variant name and metadata must come from one build",
            )
        )
    want = re.compile(rf"^_{re.escape(module)}_{re.escape(mbackend)}_{_UID_RE}$")
    if not mid.isidentifier() or not want.match(mid):
        out.append(
            (
                FAIL,
                f"metadata id {mid!r} is not _{module}_{mbackend}_<uid>",
                "the op namespace must be _<module>_<backend>_<unique build id> (docs/hub-contract.md §2.5)",
            )
        )
    return out


def _binary_problems(path: Path, mid: str, is_arch: bool) -> list[Problem]:
    """An arch variant ships exactly <id>.abi3.so, exporting PyInit_<id> and registering ops under <id>."""
    sos = so_files(path)
    if not is_arch:
        return (
            [(FAIL, f"noarch variant ships binaries: {[p.name for p in sos]}", "arch code belongs in an arch variant")]
            if sos
            else []
        )
    expected_so = f"{mid}.abi3.so"
    if [p.name for p in sos] != [expected_so]:
        return [
            (
                FAIL,
                f"expected exactly one shared object {expected_so}, found {[p.name for p in sos] or 'none'}",
                "the .so stem must equal metadata id (TORCH_EXTENSION_NAME)",
            )
        ]
    out: list[Problem] = []
    data = sos[0].read_bytes()
    if exports_symbol(data, f"PyInit_{mid}") is False:
        out.append(
            (
                FAIL,
                f"{expected_so} does not export PyInit_{mid}",
                "compile with -DTORCH_EXTENSION_NAME=<id> and REGISTER_EXTENSION(TORCH_EXTENSION_NAME)",
            )
        )
    if mid.encode() not in data.replace(f"PyInit_{mid}".encode(), b""):
        out.append(
            (
                FAIL,
                f"{expected_so} never names the op namespace {mid}",
                "register ops with TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ...)",
            )
        )
    return out


def _python_problems(path: Path, mid: str, module: str, is_arch: bool) -> list[Problem]:
    """_ops.py binds torch.ops.<id>; no absolute self-imports; __init__.py declares __all__."""
    out: list[Problem] = []
    ops_py = path / "_ops.py"
    if ops_py.is_file() and is_arch:
        src = ops_py.read_text(errors="replace")
        if f"torch.ops.{mid}" not in src and not re.search(
            rf"\bops\s*=\s*getattr\(\s*torch\.ops\s*,\s*['\"]{mid}['\"]", src
        ):
            out.append((FAIL, f"_ops.py does not bind torch.ops.{mid}", "regenerate _ops.py with ops = torch.ops.<id>"))
    for py in sorted(path.rglob("*.py")):
        bad = _absolute_self_imports(py.read_text(errors="replace"), {module, mid})
        if bad:
            out.append(
                (
                    FAIL,
                    f"{py.relative_to(path)} imports the kernel by absolute name: {', '.join(bad)}",
                    "use relative imports (from ._ops import ops): the package is loaded as sys.modules[id]",
                )
            )
    init = path / "__init__.py"
    if init.is_file() and "__all__" not in init.read_text(errors="replace"):
        out.append((WARN, "__init__.py defines no __all__ (the public API)", "list the public functions in __all__"))
    return out
