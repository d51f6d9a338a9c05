"""A stable-ABI variant carries its own copies of the libstdc++ members newer than manylinux_2_28's that torch's
header-only stable API instantiates (toolkit/build/geninclude.py, LIBSTDCXX_COMPAT). A per-torch variant finds
them exported by its torch; a stable one may not count on any torch's exports.

Built with this host's g++ (so the imports carry their symbol versions): a shared object whose code builds a
message the way torch's stable headers do (`std::stringstream` in TORCH_ERROR_CODE_CHECK, `std::ostringstream`
in STD_TORCH_CHECK) and allocates, linked with and without the compat source, read back with verify's ELF
reader and judged by verify's manylinux_2_28 policy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from toolkit.build.geninclude import LIBSTDCXX_COMPAT
from toolkit.verify.objfile import Elf
from toolkit.verify.policy import version_too_new

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is not installed: the shared objects cannot be built")

# What torch/headeronly/util/shim_utils.h and util/Exception.h compile to inside an extension, spelled out.
USER = r"""
#include <sstream>
#include <string>
#include <vector>
std::string error_code_check(const char* call, const char* file, long line) {
  std::stringstream ss;
  ss << call << " API call failed at " << file << ", line " << line;
  return std::move(ss).str();
}
std::string std_torch_check(const char* what, long line) {
  std::ostringstream oss;
  oss << what << ":" << line;
  return std::move(oss).str();
}
std::vector<long> sizes(unsigned long n) { return std::vector<long>(n, 1); }
"""


def _too_new(so: Path) -> list[str]:
    """The imports of `so` whose libstdc++/glibc version manylinux_2_28 does not offer."""
    elf = Elf.parse(so)
    return sorted(s.spelled() for s in elf.symbols() if not s.defined and s.version and version_too_new(s.version))


def _build(tmp_path: Path, name: str, compat: bool) -> Path:
    (tmp_path / "user.cpp").write_text(USER)
    sources = [str(tmp_path / "user.cpp")]
    if compat:
        (tmp_path / "compat.cpp").write_text(LIBSTDCXX_COMPAT)
        sources.append(str(tmp_path / "compat.cpp"))
    so = tmp_path / name
    # -O0: nothing inlined, so every member the code uses is referenced as clang leaves them at -O3
    argv = [GXX or "g++", "-std=c++17", "-O0", "-fPIC", "-shared", "-D_GLIBCXX_USE_CXX11_ABI=1", *sources, "-o"]
    subprocess.run([*argv, str(so)], check=True, capture_output=True, text=True)
    return so


def test_the_stable_apis_stream_messages_need_nothing_newer_than_manylinux_2_28_with_the_compat_source(
    tmp_path: Path,
) -> None:
    without = _too_new(_build(tmp_path, "without.so", compat=False))
    if not without:
        pytest.skip("this host's libstdc++ headers (older than GCC 9) instantiate nothing newer: nothing to prove")
    assert any("stringstream" in s for s in without), without  # the problem the compat source exists for
    assert _too_new(_build(tmp_path, "with.so", compat=True)) == []


def test_the_compat_source_defines_what_it_says_and_nothing_outside_std(tmp_path: Path) -> None:
    (tmp_path / "compat.cpp").write_text(LIBSTDCXX_COMPAT)
    obj = tmp_path / "compat.o"
    argv = [GXX or "g++", "-std=c++17", "-O2", "-fPIC", "-c", str(tmp_path / "compat.cpp"), "-o", str(obj)]
    subprocess.run(argv, check=True, capture_output=True, text=True)
    defined = {s.name for s in Elf.parse(obj).symbols(".symtab") if s.defined and s.binding != "STB_LOCAL"}
    assert {
        "_ZSt28__throw_bad_array_new_lengthv",
        "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev",
        "_ZNSt7__cxx1118basic_stringstreamIcSt11char_traitsIcESaIcEEC1Ev",
    } <= defined
    assert all(name.startswith(("_ZNSt", "_ZSt", "_ZNKSt", "_ZTV", "_ZTT", "DW.ref")) for name in defined), defined
