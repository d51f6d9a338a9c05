"""verify reads symbol versions itself (.dynsym + .gnu.version + .gnu.version_r) and refuses a private unwinder.

The objects are made here with gcc: a stub "libc.so.6" / "libstdc++.so.6" built with a version script defines
GLIBC_2.38, GLIBC_2.34, GLIBCXX_3.4.30, ... and a consumer linked against it carries exactly the version
requirement a glibc-2.38 host gives (readelf confirms the fixture, so the test cannot pass on a fixture that
lacks what it claims)."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.hubserver.variants import (
    NAME,
    build_fatbin,
    compile_so,
    host_variant_name,
    make_variant,
    write_metadata,
    write_project,
)
from toolkit.core import config
from toolkit.verify import FAIL, PASS, WARN, VerifyOptions, verify_build
from toolkit.verify.objfile import Elf
from toolkit.verify.symvers import check_symbols, inspect_object, version_too_new

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("g++") is None, reason="gcc/g++ are not installed"
)


def _run(*cmd: str | Path, cwd: Path | None = None) -> None:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, f"{cmd}: {res.stderr}"


def _readelf(*args: str | Path) -> str:
    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed (needed to prove what the fixture carries)")
    return subprocess.run(["readelf", "-W", *map(str, args)], capture_output=True, text=True, check=True).stdout


# Stub system libraries: (soname, version script, C source defining the symbols).
_STUBS = {
    "libc.so.6": (
        """GLIBC_2.17 { global: strtol_old; };
           GLIBC_2.34 { global: dlsym; } GLIBC_2.17;
           GLIBC_2.38 { global: __isoc23_strtol; } GLIBC_2.34;
           GLIBC_PRIVATE { global: __libc_internal; } GLIBC_2.38;""",
        "long strtol_old(void){return 0;} void *dlsym(void *h, const char *s){return 0;}\n"
        "long __isoc23_strtol(const char *s, char **e, int b){return 0;} int __libc_internal(void){return 0;}",
    ),
    "libstdc++.so.6": (
        """GLIBCXX_3.4.24 { global: cxx_ok; };
           GLIBCXX_3.4.30 { global: cxx_new; } GLIBCXX_3.4.24;
           CXXABI_1.3.15 { global: abi_new; } GLIBCXX_3.4.30;""",
        "int cxx_ok(void){return 0;} int cxx_new(void){return 0;} int abi_new(void){return 0;}",
    ),
}


@pytest.fixture(scope="module")
def objs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every object the tests inspect, compiled once."""
    d = tmp_path_factory.mktemp("symobjs")
    out: dict[str, Path] = {}
    for soname, (script, src) in _STUBS.items():
        stem = soname.split(".so")[0]
        (d / f"{stem}.map").write_text(script)
        (d / f"{stem}.c").write_text(src)
        _run("gcc", "-shared", "-fPIC", "-o", d / f"{stem}-stub.so", d / f"{stem}.c",
             f"-Wl,--version-script={d / f'{stem}.map'}", f"-Wl,-soname,{soname}")  # fmt: skip

    def consumer(name: str, calls: list[str], *, stub: str | None = "libc", extra: str = "") -> None:
        decls = "".join(f"extern long {c}();\n" for c in calls)
        body = " + ".join(f"{c}()" for c in calls) or "0"
        (d / f"{name}.c").write_text(f"{decls}{extra}\nlong use(void) {{ return {body}; }}\n")
        link = [d / f"{stub}-stub.so"] if stub else []
        _run("gcc", "-shared", "-fPIC", "-o", d / f"{name}.so", d / f"{name}.c", *link)
        out[name] = d / f"{name}.so"

    consumer("isoc23", ["__isoc23_strtol"])
    consumer("dlsym234", ["dlsym"])
    consumer("private", ["__libc_internal"])
    consumer("old_ok", ["strtol_old"])
    consumer("cxx_new", ["cxx_new", "abi_new"], stub="libstdc++")
    consumer("cxx_ok", ["cxx_ok"], stub="libstdc++")
    # Linked against no library that defines it: the import stays unversioned.
    consumer("unversioned", ["strlcpy"], stub=None)
    consumer("weak_unversioned", [], stub=None, extra="extern long strlcpy() __attribute__((weak));\n"
             "long probe(void) { return strlcpy ? strlcpy() : 0; }")  # fmt: skip
    # A real C++ extension-like object: throws, has cleanups (landing pads call _Unwind_Resume).
    cxx = textwrap.dedent("""
        #include <stdexcept>
        #include <string>
        @UNWIND@
        extern "C" long checked(long n) {
            std::string what = "n must be positive, got " + std::to_string(n);
            if (n <= 0) throw std::invalid_argument(what);
            return n;
        }
    """)
    private = 'extern "C" @VIS@ void _Unwind_Resume(void *) { __builtin_trap(); }'
    variants = {
        "cxx_clean": "",
        "unwind_exported": private.replace("@VIS@", ""),
        "unwind_hidden": private.replace("@VIS@", '__attribute__((visibility("hidden")))'),
    }
    for name, unwind in variants.items():
        (d / f"{name}.cpp").write_text(cxx.replace("@UNWIND@", unwind))
        _run("g++", "-shared", "-fPIC", "-O1", "-o", d / f"{name}.so", d / f"{name}.cpp")
        out[name] = d / f"{name}.so"
        if shutil.which("strip"):
            shutil.copy(d / f"{name}.so", d / f"{name}_stripped.so")
            _run("strip", "--strip-all", d / f"{name}_stripped.so")
            out[f"{name}_stripped"] = d / f"{name}_stripped.so"
    return out


def _bad(path: Path) -> list[str]:
    rep = inspect_object(path)
    assert rep is not None and not rep.error
    return [t.line() for t in rep.too_new]


def test_fixture_really_carries_the_glibc_2_38_verneed(objs: dict[str, Path]) -> None:
    text = _readelf("-V", objs["isoc23"])
    assert "File: libc.so.6" in text and "Name: GLIBC_2.38" in text
    assert "__isoc23_strtol@GLIBC_2.38" in _readelf("--dyn-syms", objs["isoc23"])


def test_isoc23_strtol_at_glibc_2_38_is_caught_naming_symbol_version_and_library(objs: dict[str, Path]) -> None:
    assert _bad(objs["isoc23"]) == ["__isoc23_strtol@GLIBC_2.38 (from libc.so.6)"]
    [f] = check_symbols("v", [objs["isoc23"]])
    assert f.status == FAIL and f.check == "symbols"
    assert "isoc23.so" in f.message and "__isoc23_strtol@GLIBC_2.38 (from libc.so.6)" in f.message
    assert "manylinux_2_28" in f.message


def test_parser_agrees_with_readelf_on_every_import(objs: dict[str, Path]) -> None:
    for name in ("isoc23", "dlsym234", "cxx_new", "cxx_clean"):
        listed = set()
        for line in _readelf("--dyn-syms", objs[name]).splitlines():
            f = line.split()
            if len(f) >= 8 and f[6] == "UND" and f[0] != "0:":
                listed.add(f[7].split(" (")[0])
        with Elf.open(objs[name]) as elf:
            mine = {s.spelled() for s in elf.symbols() if not s.defined}
        assert mine == listed, name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dlsym234", ["dlsym@GLIBC_2.34 (from libc.so.6)"]),
        ("private", ["__libc_internal@GLIBC_PRIVATE (from libc.so.6)"]),
        ("cxx_new", ["abi_new@CXXABI_1.3.15 (from libstdc++.so.6)", "cxx_new@GLIBCXX_3.4.30 (from libstdc++.so.6)"]),
        ("old_ok", []),
        ("cxx_ok", []),
        ("weak_unversioned", []),
        ("cxx_clean", []),
    ],
)
def test_ceilings_per_family(objs: dict[str, Path], name: str, expected: list[str]) -> None:
    assert _bad(objs[name]) == expected


def _host_libc_version_of(symbol: str) -> str | None:
    """The version this host's libc defines `symbol` at (readelf, independent of verify), None if it has none."""
    libc = subprocess.run(["gcc", "-print-file-name=libc.so.6"], capture_output=True, text=True).stdout.strip()
    for line in _readelf("--dyn-syms", Path(libc).resolve()).splitlines():
        f = line.split()
        if len(f) >= 8 and f[6] != "UND" and f[7].split("@")[0] == symbol:
            return f[7].split("@")[-1].split(" ")[0]
    return None


def test_an_unversioned_import_is_judged_by_the_library_that_would_supply_it(objs: dict[str, Path]) -> None:
    """strlcpy without a version (no glibc table): this host's libc either defines it at GLIBC_2.38, beyond the
    policy, or not at all (glibc < 2.38); either way the import cannot resolve on a manylinux_2_28 system."""
    version = _host_libc_version_of("strlcpy")
    if version:
        why = f"only a libc.so.6 newer than manylinux_2_28's defines it ({version} > GLIBC_2.28), and torch does not export it"
    else:
        why = "defined by none of the libraries it loads (libc.so.6)"
    assert _bad(objs["unversioned"]) == [f"strlcpy (unversioned; {why})"]
    rep = inspect_object(objs["unversioned"])
    assert rep is not None and [r.line() for r in rep.unversioned] == [
        f"strlcpy -> libc.so.6 ({version})" if version else "strlcpy -> nowhere"
    ]


def test_version_ceilings() -> None:
    assert version_too_new("GLIBC_2.28") is None and version_too_new("GLIBC_2.2.5") is None
    assert version_too_new("GLIBC_2.29") == "GLIBC_2.29 > GLIBC_2.28"
    # auditwheel's manylinux_2_28 stops at GLIBCXX_3.4.24 (AlmaLinux 8 has 3.4.25, other glibc-2.28 systems
    # do not; kernel-abi-check refuses it too)
    assert version_too_new("GLIBCXX_3.4.24") is None and version_too_new("GLIBCXX_3.4.25") == (
        "GLIBCXX_3.4.25 > GLIBCXX_3.4.24"
    )
    assert version_too_new("GLIBC_2.17", "aarch64") is None and version_too_new("GLIBC_2.29", "aarch64")
    assert version_too_new("CXXABI_1.3.11") is None and version_too_new("CXXABI_1.3.12")
    assert version_too_new("GCC_7.0.0") is None and version_too_new("GCC_12.0.0")
    assert version_too_new("CXXABI_TM_1") is None and version_too_new("libcudart.so.13") is None
    assert "2.36" in (version_too_new("GLIBC_ABI_DT_RELR") or "")


@pytest.mark.parametrize("name", ["unwind_exported", "unwind_hidden", "unwind_hidden_stripped"])
def test_a_private_unwind_resume_is_caught(objs: dict[str, Path], name: str) -> None:
    if name not in objs:
        pytest.skip("strip is not installed")
    rep = inspect_object(objs[name])
    assert rep is not None and rep.unwinder and rep.unwinder[0].startswith("_Unwind_Resume")
    findings = check_symbols("v", [objs[name]], host_toolchain_ok=True)  # never waived
    assert [f.status for f in findings] == [FAIL]
    assert "defines its own unwinder" in findings[0].message and "crashes" in findings[0].message


def test_clean_cxx_objects_pass_stripped_or_not(objs: dict[str, Path]) -> None:
    clean = [objs["cxx_clean"], objs["old_ok"]] + ([objs["cxx_clean_stripped"]] if "cxx_clean_stripped" in objs else [])
    [f] = check_symbols("v", clean)
    assert f.status == PASS and f"{len(clean)} ELF binaries" in f.message
    with Elf.open(objs["cxx_clean"]) as elf:  # the clean one resumes through libgcc_s
        assert any(s.name == "_Unwind_Resume" and s.library == "libgcc_s.so.1" for s in elf.symbols())


# --- through verify ------------------------------------------------------------------------------------


def _relink(variant_dir: Path, **kw: Any) -> None:
    """Replace the variant's extension with one compiled with extra code/link args, metadata re-digested."""
    import json

    meta = json.loads((variant_dir / "metadata.json").read_text())
    fatbin = build_fatbin([[(80, "", False), (90, "", False)]])  # what make_variant lays out for 8.0, 9.0
    compile_so(variant_dir, meta["id"], fatbin=fatbin, **kw)
    write_metadata(variant_dir, ident=meta["id"], backend="cuda", archs=meta["backend"].get("archs"),
                   prov=meta["provenance"])  # fmt: skip


def test_verify_fails_a_variant_with_a_too_new_import_and_publish_cannot_ship_it(
    objs: dict[str, Path], tmp_path: Path
) -> None:
    root = write_project(tmp_path / "proj")
    cfg, build = config.load(root), root / "build" / NAME
    v = make_variant(build)
    _relink(v, extra_c="extern long __isoc23_strtol(); long use(void) { return __isoc23_strtol(); }\n",
            link=(str(objs["isoc23"].parent / "libc-stub.so"),))  # fmt: skip
    report = verify_build(cfg, options=VerifyOptions(check_vendor=False, smoke=False))
    assert not report.ok
    sym = [f for f in report.variants[0].findings if f.check == "symbols"]
    assert [f.status for f in sym] == [FAIL] and "__isoc23_strtol@GLIBC_2.38 (from libc.so.6)" in sym[0].message
    # Every other check passes: the finding is precisely the symbol version (kernel-abi-check sees this
    # GNU-ld-linked import too; it misses lld-linked ones).
    assert {f.check for f in report.failures()} == {"symbols", "abi"}
    # With the host toolchain accepted it is a warning, and the variant is marked not for huggingface.co.
    from toolkit.verify import stamp_verdict

    report = verify_build(cfg, options=VerifyOptions(check_vendor=False, smoke=False, host_toolchain_ok=True))
    assert report.ok and {f.status for f in report.variants[0].findings if f.check == "symbols"} == {WARN}
    ok, why = stamp_verdict(build, build / host_variant_name(), official_hub=True)
    assert not ok and "not for huggingface.co" in why


def test_verify_fails_a_variant_carrying_its_own_unwinder(tmp_path: Path) -> None:
    root = write_project(tmp_path / "proj")
    cfg, build = config.load(root), root / "build" / NAME
    v = make_variant(build)
    _relink(v, extra_c="void _Unwind_Resume(void *e) { (void)e; __builtin_trap(); }\n")
    report = verify_build(cfg, options=VerifyOptions(check_vendor=False, smoke=False, host_toolchain_ok=True))
    [f] = [f for f in report.failures()]
    assert f.check == "symbols" and "_Unwind_Resume" in f.message and f.variant == host_variant_name()


# --- with the real zig toolchain (lld): the cases that motivated the check -----------------------------


def _zig() -> str:
    try:
        from toolkit.build.zig import find_zig  # the pinned toolchain, when the build has provisioned it

        found = find_zig()
    except ImportError:
        found = None
    if not found:
        import importlib.util

        spec = importlib.util.find_spec("ziglang")  # the pip wheel: the binary sits in the package
        if spec is not None and spec.origin and (Path(spec.origin).parent / "zig").is_file():
            found = str(Path(spec.origin).parent / "zig")
    found = found or shutil.which("zig")
    if not found:
        pytest.skip("zig is not installed (ggml-vendor build --provision installs the pinned ziglang)")
    return found


@pytest.mark.slow
def test_lld_linked_imports_that_kernel_abi_check_misses_are_caught(tmp_path: Path) -> None:
    """zig (clang + lld) against glibc 2.39, as on Ubuntu 24.04: C23 strtol, dlsym and pthread_rwlock_* at
    2.38/2.34. kernel-abi-check 0.14.1 reports nothing for an lld-linked object; this check names all three."""
    src = tmp_path / "a.c"
    src.write_text(
        "#define _GNU_SOURCE\n#include <stdlib.h>\n#include <dlfcn.h>\n#include <pthread.h>\n"
        "long f(const char *s) { return strtol(s, 0, 10); }\n"
        'void *g(void *h) { return dlsym(h, "x"); }\n'
        "int r(pthread_rwlock_t *l) { return pthread_rwlock_rdlock(l); }\n"
    )
    so = tmp_path / "lld239.so"
    _run(_zig(), "cc", "-target", "x86_64-linux-gnu.2.39", "-std=c2x", "-shared", "-fPIC", "-o", so, src)
    assert "Name: GLIBC_2.38" in _readelf("-V", so)
    assert set(_bad(so)) == {
        "__isoc23_strtol@GLIBC_2.38 (from libc.so.6)",
        "dlsym@GLIBC_2.34 (from libc.so.6)",
        "pthread_rwlock_rdlock@GLIBC_2.34 (from libc.so.6)",
    }


@pytest.mark.slow
def test_zig_with_lgcc_s_links_a_private_unwinder_that_kills_every_exception(
    objs: dict[str, Path], tmp_path: Path
) -> None:
    """`-lgcc_s` makes zig link its own static libunwind: the .so then aborts on the first exception thrown
    through it. Linking libgcc_s by path does not. verify tells them apart, stripped or not."""
    zig = _zig()
    major = subprocess.run(["g++", "-dumpversion"], capture_output=True, text=True).stdout.strip().split(".")[0]
    std = [f"-I/usr/include/c++/{major}", f"-I/usr/include/x86_64-linux-gnu/c++/{major}"]
    if not Path(std[1][2:]).is_dir():
        pytest.skip(f"libstdc++ {major} headers for x86_64 are not where Debian/Ubuntu put them")
    libstdcxx = subprocess.run(["g++", "-print-file-name=libstdc++.so"], capture_output=True, text=True).stdout.strip()
    libgcc_s = subprocess.run(["g++", "-print-file-name=libgcc_s.so.1"], capture_output=True, text=True).stdout.strip()
    src = objs["cxx_clean"].with_suffix(".cpp")
    base = [zig, "c++", "-target", "x86_64-linux-gnu.2.28", "-nostdinc++", *std, "-shared", "-fPIC"]
    good, bad = tmp_path / "good.so", tmp_path / "bad.so"
    _run(*base, "-o", good, src, "-nostdlib++", libstdcxx, libgcc_s)
    _run(*base, "-o", bad, src, "-nostdlib++", libstdcxx, "-lgcc_s")
    driver = tmp_path / "driver.cpp"
    driver.write_text(
        "#include <cstdio>\n#include <dlfcn.h>\n#include <stdexcept>\n"
        "int main(int, char **argv) {\n"
        "  void *h = dlopen(argv[1], RTLD_NOW); if (!h) return 2;\n"
        '  auto f = (long (*)(long)) dlsym(h, "checked");\n'
        '  try { f(0); } catch (const std::exception &e) { std::printf("CAUGHT %s\\n", e.what()); return 0; }\n'
        "  return 1;\n}\n"
    )
    _run("g++", "-o", tmp_path / "driver", driver, "-ldl")
    ok = subprocess.run([tmp_path / "driver", good], capture_output=True, text=True)
    assert ok.returncode == 0 and "CAUGHT n must be positive, got 0" in ok.stdout
    crash = subprocess.run([tmp_path / "driver", bad], capture_output=True, text=True)
    assert crash.returncode != 0 and "CAUGHT" not in crash.stdout  # terminate: the exception never arrives
    assert check_symbols("v", [good])[0].status == PASS
    assert [f.status for f in check_symbols("v", [bad])] == [FAIL]
    if shutil.which("strip"):
        stripped = tmp_path / "bad_stripped.so"
        shutil.copy(bad, stripped)
        _run("strip", "--strip-all", stripped)
        [f] = check_symbols("v", [stripped])
        assert f.status == FAIL and "_Unwind_Resume (stripped" in f.message
