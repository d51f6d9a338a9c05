"""Where each unversioned import of an extension would resolve, and which of them only a system library newer
than manylinux_2_28 defines.

An import without a version is bound at load time to the first library of the extension's dependency tree
that defines the name. A variant built on a new distribution can import `std::ios_base_library_init`
(GLIBCXX_3.4.32) unversioned because the link bound it to torch's copy: it then loads wherever torch exports
that symbol, and fails with "undefined symbol" on a manylinux_2_28 system where torch does not. So each
unversioned import is looked up in the libraries the loader would search — the extension's DT_NEEDED tree as
auditwheel's lddtree resolves it, with the variant's torch libraries (its build environment) on the path —
and judged by the first definition that a manylinux_2_28 system would offer: torch's or another shipped
library's is fine; a system library's (auditwheel's whitelist) is fine only within the policy's versions.
"""

from __future__ import annotations

import sys
import sysconfig
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

from toolkit.verify.objfile import Elf, Symbol
from toolkit.verify.policy import POLICY, Manylinux

_SHOWN = 4


@dataclass(frozen=True)
class Library:
    """One library of the dependency tree; `path` None when this host has no such file for the extension's CPU."""

    soname: str
    path: Path | None
    torch: bool = False  # one of the variant's torch libraries (libc10.so, libtorch_cpu.so, ...)
    system: bool = False  # in the policy's whitelist: the host supplies it, at the policy's versions at best
    interpreter: bool = False  # the Python executable or its libpython


@dataclass(frozen=True)
class Resolution:
    """Where one unversioned import resolves; `problem` is why a manylinux_2_28 system cannot resolve it."""

    symbol: str
    library: str  # soname of the first definition ("" when none was found)
    version: str = ""  # the version a system library defines it at ("GLIBCXX_3.4.32")
    torch: bool = False
    problem: str = ""
    unresolved_here: bool = False  # no definition found, but some libraries of the tree are missing here

    def line(self) -> str:
        if not self.library:
            return f"{self.symbol} -> unresolved here" if self.unresolved_here else f"{self.symbol} -> nowhere"
        where = f"{self.library}" + (f" ({self.version})" if self.version else "") + (" [torch]" if self.torch else "")
        return f"{self.symbol} -> {where}"


# What every Python process has loaded before an extension: the global scope an import falls back to even
# when the extension does not name the library (gcc --as-needed drops a libc that only a weak or unversioned
# reference would use). The interpreter itself comes first: it supplies the Python C API.
GLOBAL_SCOPE = ("libc.so.6",)


def python_scope() -> list[Library]:
    """The running interpreter's executable and, for a shared-library build, its libpython: where the C API
    imports (PyModule_Create2, ...) resolve; the abi check holds them to the stable ABI."""
    exe = Path(sys.executable).resolve()
    scope = [Library(f"python{sys.version_info.major}.{sys.version_info.minor}", exe, interpreter=True)]
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and soname and (Path(libdir) / soname).is_file():
        scope.append(Library(str(soname), (Path(libdir) / soname).resolve(), interpreter=True))
    return scope


def _bfs(needed: tuple[str, ...], libraries: dict[str, Any]) -> list[str]:
    order: list[str] = []
    queue = list(needed)
    while queue:
        name = queue.pop(0)
        if name in order:
            continue
        order.append(name)
        lib = libraries.get(name)
        queue += list(lib.needed) if lib is not None and lib.realpath is not None else []
    return order


def dependency_tree(so: Path, torch_lib_dirs: tuple[Path, ...], policy: Manylinux) -> list[Library]:
    """The libraries an import is looked up in, in the loader's order: the interpreter, the extension's
    DT_NEEDED tree breadth-first (lddtree resolves the files), then the rest of the process's global scope."""
    from auditwheel.lddtree import find_lib, ldd, load_ld_paths
    from auditwheel.libc import Libc

    cached = load_ld_paths(Libc.GLIBC)  # lddtree caches this dict: never change it in place
    ldpaths = {**cached, "env": [str(d) for d in torch_lib_dirs] + list(cached.get("env", []))}
    tree = ldd(so, ldpaths=ldpaths)
    order = _bfs(tree.needed, tree.libraries)
    paths = {n: lib.realpath for n, lib in tree.libraries.items()}
    for name in GLOBAL_SCOPE:
        if name not in order:
            order.append(name)
            paths[name] = find_lib(tree.platform, name, ldpaths["env"] + ldpaths["conf"])[0]
    roots = [d.resolve() for d in torch_lib_dirs]
    out = python_scope()
    for name in order:
        found = paths.get(name)
        path = Path(found) if found is not None else None
        in_torch = path is not None and any(path.is_relative_to(r) for r in roots)
        out.append(Library(name, path, torch=in_torch, system=name in policy.whitelist))
    return out


@lru_cache(maxsize=32)
def _system_versions(path: Path) -> dict[str, str]:
    """name -> version of every definition in a system library (a few thousand symbols: read once)."""
    with Elf.open(path, symtab=False) as elf:
        return {s.name: s.version for s in elf.symbols() if s.defined}


class _Hashed:
    """A shipped library (torch's, CUDA's: hundreds of MB) asked one name at a time through its symbol hash
    table with pyelftools, which reads only the hash chain and the few entries it points at."""

    def __init__(self, stream: BinaryIO) -> None:
        from elftools.elf.elffile import ELFFile
        from elftools.elf.hash import ELFHashSection, GNUHashSection

        elf = ELFFile(stream)
        self.table = next((s for s in elf.iter_sections() if isinstance(s, GNUHashSection | ELFHashSection)), None)

    def defines(self, name: str) -> bool | None:
        """None when the library has no hash table to ask."""
        if self.table is None:
            return None
        sym = self.table.get_symbol(name)
        return sym is not None and sym["st_shndx"] != "SHN_UNDEF"


def _defines(lib: Library, symbol: str, opened: dict[Path, _Hashed]) -> tuple[bool, str]:
    """(defined, version) of `symbol` in one library of the tree."""
    if lib.path is None:
        return False, ""
    if lib.system:
        versions = _system_versions(lib.path)
        return symbol in versions, versions.get(symbol, "")
    found = opened[lib.path].defines(symbol)
    if found is None:  # no hash table: read the whole table once
        found = symbol in _system_versions(lib.path)
    return found, ""


def _resolve(symbol: str, libs: list[Library], opened: dict[Path, _Hashed], policy: Manylinux) -> Resolution:
    """The first definition a manylinux_2_28 system would offer: the shipped libraries (torch's, CUDA's) are the
    same files there, a system library has the definition only at a version within the policy."""
    too_new: tuple[Library, str] | None = None
    for lib in libs:
        defined, version = _defines(lib, symbol, opened)
        if not defined:
            continue
        if lib.system and policy.too_new(version):
            too_new = too_new or (lib, version)
            continue
        return Resolution(symbol, lib.soname, version, torch=lib.torch)
    if too_new is not None:
        first, version = too_new
        return Resolution(
            symbol,
            first.soname,
            version,
            problem=f"only a {first.soname} newer than {POLICY}'s defines it ({policy.too_new(version)}), "
            "and torch does not export it",
        )
    if any(lib.path is None for lib in libs):
        return Resolution(symbol, "", unresolved_here=True)
    names = ", ".join(lib.soname for lib in libs if not lib.interpreter) or "none"
    return Resolution(symbol, "", problem=f"defined by none of the libraries it loads ({names})")


def resolve_unversioned(
    so: Path, imports: list[Symbol], torch_lib_dirs: tuple[Path, ...], policy: Manylinux
) -> list[Resolution]:
    """Every non-weak unversioned import of `so`, resolved (a weak one may stay null without failing)."""
    names = sorted({s.name for s in imports if not s.defined and not s.version and not s.weak})
    if not names:
        return []
    libs = dependency_tree(so, torch_lib_dirs, policy)
    with ExitStack() as stack:
        opened: dict[Path, _Hashed] = {}
        for lib in libs:
            if lib.path is not None and not lib.system:
                try:
                    opened[lib.path] = _Hashed(stack.enter_context(lib.path.open("rb")))
                except Exception:  # pyelftools' ELFError, construct's errors, OSError: unreadable here
                    libs = [x if x is not lib else Library(lib.soname, None) for x in libs]
        return [_resolve(n, libs, opened, policy) for n in names]


def summary(resolutions: list[Resolution]) -> str:
    """'412 unversioned imports: 398 -> libtorch_cpu.so [torch], 10 -> libc10.so [torch], 4 -> libstdc++.so.6'."""
    counts = Counter(
        (r.library + (" [torch]" if r.torch else "")) if r.library else "unresolved here" for r in resolutions
    )
    parts = [f"{n} -> {where}" for where, n in counts.most_common(_SHOWN)]
    rest = sum(n for _, n in counts.most_common()[_SHOWN:])
    return f"{len(resolutions)} unversioned imports: " + ", ".join(parts) + (f", {rest} elsewhere" if rest else "")


def torch_lib_dirs(variant: str) -> tuple[Path, ...]:
    """The torch/lib directory of the variant's build environment on this host (the current interpreter's torch
    or a managed one, matched on torch version, compute and CPU as the build matched it); empty when none.
    Reads version files only: nothing is imported."""
    from toolkit.build.envs import host_platform
    from toolkit.build.torchenvs import discover_envs

    parts = variant.split("-")
    if len(parts) < 4 or not parts[0].startswith("torch") or len(parts[0]) < 7:
        return ()
    digits = parts[0].removeprefix("torch")
    torch_minor, compute, cpu = f"{digits[0]}.{digits[1:]}", parts[-3], parts[-2]
    host_cpu = host_platform()[1]
    same_cpu = [e for e in discover_envs() if e.torch_minor == torch_minor and (e.cpu or host_cpu) == cpu]
    exact = [Path(e.torch_dir) / "lib" for e in same_cpu if e.compute == compute]
    found = tuple(dict.fromkeys(d for d in exact if d.is_dir()))
    if found:
        return found
    # No environment of the row's exact compute here (a publisher re-checking another runner's artifact): the
    # same torch release for another CUDA/ROCm version exports the same C++ runtime symbols, so its libraries
    # stand in for the question "does torch export it".
    other = [Path(e.torch_dir) / "lib" for e in same_cpu]
    return tuple(dict.fromkeys(d for d in other if d.is_dir()))
