"""The hermetic host toolchain: the pinned zig (PyPI `ziglang`) as C/C++ compiler and linker targeting
`<cpu>-linux-gnu.2.28`, so Linux variants import no glibc symbol newer than manylinux_2_28 allows whatever
the build host's glibc is, while the C++ standard library stays the host's libstdc++ (the one torch's ABI
needs, linked dynamically like kernel-builder's builds).

A generated wrapper directory holds `clang++` (a POSIX shell script; nvcc takes it as `-ccbin`, and
because it is named clang++ nvcc passes it clang-style flags), the `sys/single_threaded.h` shim and the
multiarch python include links. What it does and why:

- answers `-dumpmachine` itself (zig prints a triple nvcc does not understand);
- drops `-fno-gnu-unique` (a gcc-only flag);
- `-nostdinc++ -I<libstdc++ dirs>` (zig defaults to libc++, whose `std::__1` is not torch's ABI; `-I` and
  not `-isystem`, or zig's libc dirs come first and libstdc++'s `#include_next` breaks);
- `-I<shim>`: zig's glibc 2.28 headers refuse `<sys/single_threaded.h>`, which libstdc++ 11+ includes; the
  shim declares `__libc_single_threaded`, which glibc_compat.c defines (steps.py);
- `-idirafter <dir>` holding only `<triple>/python3.*` links (Debian/Ubuntu's Python.h includes
  `<x86_64-linux-gnu/python3.X/pyconfig.h>` and zig does not search /usr/include);
- when linking: `-nostdlib++ <libstdc++.so> <libgcc_s.so.1>` BY PATH. Never `-lgcc_s`: zig then links its
  own static libunwind into the .so, a private `_Unwind_Resume` that libstdc++'s throw cannot use, and
  every C++ exception crashes the process.

zig 0.15 fails against CUDA 13.0's math headers (C23 rsqrt declarations), hence the pin. The toolchain's
identity (zig version + the wrapper's content hash) is part of every build step's cache key.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from toolkit.build.provision import PARTIAL, PYPI, Install, default_toolchains_dir
from toolkit.core import fs
from toolkit.core.errors import BuildError

ZIG_VERSION = "0.14.1"
ZIG_PACKAGE = "ziglang"
GLIBC_TARGET = "2.28"  # manylinux_2_28
WRAPPER_SCHEMA = "1"

SINGLE_THREADED_SHIM = """\
/* ggml-vendor: zig's glibc 2.28 headers refuse <sys/single_threaded.h> (glibc >= 2.32), which libstdc++ 11+
   includes. Declare the variable; glibc_compat.c defines a hidden copy fixed at 0 (atomics always used). */
#pragma once
#ifdef __cplusplus
extern "C" char __libc_single_threaded;
#else
extern char __libc_single_threaded;
#endif
"""


@dataclass(frozen=True)
class ZigToolchain:
    zig: str  # the zig binary
    version: str
    cpu: str  # target cpu (x86_64, aarch64)
    wrapper_dir: str
    wrapper_sha256: str
    gcc_version: str
    libstdcxx: str
    libgcc_s: str
    script: str = ""  # the wrapper's content (plan_toolchain computes it, materialize writes it)
    links: tuple[tuple[str, str], ...] = ()  # pyinc/<triple>/python3.X -> the multiarch include dir

    @property
    def cxx(self) -> str:
        return str(Path(self.wrapper_dir) / "clang++")

    @property
    def target(self) -> str:
        return f"{self.cpu}-linux-gnu.{GLIBC_TARGET}"

    @property
    def identity(self) -> str:
        return f"zig {self.version} {self.target} wrapper {self.wrapper_sha256[:16]} libstdc++ {self.gcc_version}"

    def provenance(self) -> dict[str, str]:
        return {
            "kind": "zig",
            "zig": self.version,
            "target": self.target,
            "wrapper-sha256": self.wrapper_sha256,
            "libstdc++": f"g++ {self.gcc_version} ({Path(self.libstdcxx).name})",
        }


# --- finding / provisioning zig ----------------------------------------------------------------------------


def zig_install(base: Path | None = None) -> Install:
    path = (base or default_toolchains_dir()) / f"zig-{ZIG_VERSION}"
    return Install(
        what=f"zig {ZIG_VERSION}",
        package=ZIG_PACKAGE,
        version=ZIG_VERSION,
        requirement=f"{ZIG_PACKAGE}=={ZIG_VERSION}",
        path=path,
        index=PYPI,
        no_deps=True,
        check=lambda p: "" if (p / "ziglang" / "zig").is_file() else "the wheel has no ziglang/zig",
    )


def find_zig(base: Path | None = None) -> str | None:
    """The pinned zig: `GGML_VENDOR_ZIG` (a zig binary inside an unpacked ziglang tree), else the one
    provisioned under the toolchains dir, else the `ziglang` package of this interpreter (`pip install -e
    '.[cuda]'` brings it) when it is exactly the pinned version."""
    env = os.environ.get("GGML_VENDOR_ZIG")  # an unpacked ziglang 0.14.1 tree elsewhere (e.g. offline hosts)
    if env:
        return env
    inst = zig_install(base)
    if inst.ready:
        return str(inst.path / "ziglang" / "zig")
    try:
        if importlib.metadata.version(ZIG_PACKAGE) != ZIG_VERSION:
            return None
    except importlib.metadata.PackageNotFoundError:
        return None
    spec = importlib.util.find_spec(ZIG_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    zig = Path(list(spec.submodule_search_locations)[0]) / "zig"
    return str(zig) if zig.is_file() else None


# --- the host's libstdc++ ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LibStdCxx:
    gcc: str
    version: str  # g++ -dumpversion ("12")
    include_dirs: tuple[str, ...]
    libstdcxx: str
    libgcc_s: str


def _out(cmd: list[str], stdin: str | None = None) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, input=stdin)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout + p.stderr


def cross_libstdcxx(cpu: str, root: Path = Path("/usr")) -> LibStdCxx | None:
    """libstdc++ of another architecture as Debian/Ubuntu's cross packages install it
    (`libstdc++-<ver>-dev-<arch>-cross`: /usr/<triple>/include/c++/<ver>, /usr/<triple>/lib), or None."""
    triple = f"{cpu}-linux-gnu"
    base = root / triple
    versions = sorted(
        (p for p in (base / "include" / "c++").glob("*") if (p / triple).is_dir()),
        key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)],
    )
    libstdcxx, libgcc_s = base / "lib" / "libstdc++.so.6", base / "lib" / "libgcc_s.so.1"
    if not versions or not libstdcxx.exists() or not libgcc_s.exists():
        return None
    inc = versions[-1]
    dirs = tuple(str(d) for d in (inc, inc / triple, inc / "backward") if d.is_dir())
    return LibStdCxx("", inc.name, dirs, os.path.realpath(libstdcxx), os.path.realpath(libgcc_s))


def host_libstdcxx(gcc: str | None = None) -> LibStdCxx:
    """libstdc++'s headers and shared libraries from the host's g++ (the ABI torch is built against)."""
    gcc = gcc or shutil.which("g++") or ""
    if not gcc:
        raise BuildError(
            "the zig toolchain needs the host's libstdc++ headers (g++), and no g++ is on PATH",
            "install g++ (e.g. apt-get install g++), or use --toolchain system",
        )
    version = _out([gcc, "-dumpversion"]).strip()
    text = _out([gcc, "-xc++", "-E", "-v", "-"], stdin="")
    m = re.search(r"#include <\.\.\.> search starts here:\n(.*?)\nEnd of search list", text, re.S)
    dirs = tuple(
        os.path.normpath(d.strip())
        for d in (m[1].splitlines() if m else [])
        if "/c++/" in d and Path(d.strip()).is_dir()
    )
    libstdcxx = os.path.realpath(_out([gcc, "-print-file-name=libstdc++.so"]).strip())
    libgcc_s = os.path.realpath(_out([gcc, "-print-file-name=libgcc_s.so.1"]).strip())
    if not dirs or not Path(libstdcxx).is_file() or not Path(libgcc_s).is_file():
        raise BuildError(
            f"cannot find libstdc++ headers and libraries through {gcc} (dirs {list(dirs)}, {libstdcxx}, {libgcc_s})",
            "install libstdc++-dev for your g++, or use --toolchain system",
        )
    return LibStdCxx(gcc, version, dirs, libstdcxx, libgcc_s)


def python_multiarch_links() -> dict[str, str]:
    """`<triple>/python3.X` -> /usr/include/<triple>/python3.X for every multiarch Python include dir."""
    links = {}
    for d in sorted(glob.glob("/usr/include/*-linux-gnu/python3*")):
        p = Path(d)
        links[f"{p.parent.name}/{p.name}"] = str(p)
    return links


# --- the wrapper -------------------------------------------------------------------------------------------


def wrapper_script(zig: str, cpu: str, std: LibStdCxx, shim: str, pyinc: str | None) -> str:
    q = shlex.quote
    incs = " ".join(f"-I{q(d)}" for d in std.include_dirs)
    # nvcc passes -m64 to its host compiler; clang knows it for x86 only
    m64 = "" if cpu == "x86_64" else "\n    -m64) continue;;"
    after = f" -idirafter {q(pyinc)}" if pyinc else ""
    return f"""#!/bin/sh
# Generated by ggml-vendor (toolkit/build/zig.py, schema {WRAPPER_SCHEMA}): zig {ZIG_VERSION} as the C/C++ compiler
# and linker for {cpu}-linux-gnu with glibc {GLIBC_TARGET} symbol versions and the host's libstdc++ (g++ {std.version}).
link=1
for a do
  shift
  case "$a" in
    -dumpmachine) echo {cpu}-linux-gnu; exit 0;;
    -fno-gnu-unique) continue;;{m64}
    -c|-E|-S|-M|-MM|--version|-dumpversion) link=0;;
  esac
  set -- "$@" "$a"
done
if [ "$link" = 1 ]; then
  # libgcc_s by path, never -lgcc_s (see toolkit/build/zig.py)
  set -- "$@" -nostdlib++ {q(std.libstdcxx)} {q(std.libgcc_s)}
fi
exec {q(zig)} c++ -target {cpu}-linux-gnu.{GLIBC_TARGET} -nostdinc++ -I{q(shim)} {incs}{after} "$@"
"""


def plan_toolchain(
    zig: str, cpu: str, base: Path | None = None, gcc: str | None = None, std: LibStdCxx | None = None
) -> ZigToolchain:
    """The wrapper dir for `zig` targeting `cpu`, computed without writing it (`materialize` makes it); its
    name is its content hash, so an edited recipe is a new toolchain and a cache miss. `std`: the target's
    libstdc++ (default: the host g++'s; a cross build passes cross_libstdcxx(cpu))."""
    base = base or default_toolchains_dir()
    std = std or host_libstdcxx(gcc)
    links = python_multiarch_links()
    # The content hash covers the script (with placeholders for the wrapper's own path), the shim, the
    # python links and zig's version.
    proto = wrapper_script(zig, cpu, std, f"{_PLACEHOLDER}/shim", f"{_PLACEHOLDER}/pyinc" if links else None)
    blob = "\0".join([proto, SINGLE_THREADED_SHIM, repr(sorted(links.items())), ZIG_VERSION])
    sha = hashlib.sha256(blob.encode()).hexdigest()
    final = base / f"zig-wrapper-{cpu}-{sha[:16]}"
    return ZigToolchain(
        zig=zig,
        version=zig_version(zig),
        cpu=cpu,
        wrapper_dir=str(final),
        wrapper_sha256=sha,
        gcc_version=std.version,
        libstdcxx=std.libstdcxx,
        libgcc_s=std.libgcc_s,
        script=proto.replace(_PLACEHOLDER, str(final)),
        links=tuple(sorted(links.items())),
    )


_PLACEHOLDER = "@WRAPPER@"


def materialize(tc: ZigToolchain) -> ZigToolchain:
    """Write the wrapper dir `plan_toolchain` computed, once (atomically: staged, swapped in by
    toolkit.core.fs; one another build made meanwhile is kept, its name being its content's hash)."""
    final = Path(tc.wrapper_dir)
    fs.recover(final, f"{final.name}{PARTIAL}")  # what a run killed mid-way left, even when made
    if (final / "clang++").is_file():
        return tc
    with fs.staged(final, f"{final.name}{PARTIAL}", keep_existing=True) as stage:
        (stage / "shim" / "sys").mkdir(parents=True)
        (stage / "shim" / "sys" / "single_threaded.h").write_text(SINGLE_THREADED_SHIM)
        for rel, target in tc.links:
            (stage / "pyinc" / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, stage / "pyinc" / rel)
        (stage / "clang++").write_text(tc.script)
        (stage / "clang++").chmod(0o755)
    return tc


def zig_version(zig: str) -> str:
    return _out([zig, "version"]).strip() or ZIG_VERSION
