"""Unversioned libstdc++ imports newer than manylinux_2_28: verify lists every unversioned import with the
library it would bind to, and fails the ones only a newer libstdc++ defines unless the variant's torch exports
them.

The objects are ours, made here with gcc: a stub "libstdc++.so.6" defines the three symbols a link on Ubuntu
24.04 imports without a version (std::ios_base_library_init at GLIBCXX_3.4.32, std::__throw_bad_array_new_length
at 3.4.29, the basic_ostringstream() constructor at 3.4.26) plus one within the policy; the extension is
linked against a "link-time torch" that exports all four unversioned, so its imports carry no version (readelf
confirms it); the pinned torch of the variant's build environment exports only two of them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import TypedDict

import pytest

from tests.helpers.hubserver.variants import NAME, build_fatbin, compile_so, make_variant, write_metadata, write_project
from toolkit.core import config
from toolkit.verify import FAIL, PASS, VerifyOptions, verify_build
from toolkit.verify.imports import torch_lib_dirs
from toolkit.verify.symvers import check_symbols, inspect_object

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

IOS_INIT = "_ZSt21ios_base_library_initv"  # GLIBCXX_3.4.32 (gcc 13)
BAD_ARRAY = "_ZSt28__throw_bad_array_new_lengthv"  # GLIBCXX_3.4.29 (gcc 11)
OSTRINGSTREAM = "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1Ev"  # GLIBCXX_3.4.26 (gcc 9)
OLD = "_ZNSt8ios_base4InitC1Ev"  # GLIBCXX_3.4: every libstdc++ has it
VARIANT = "torch213-cxx11-cu130-x86_64-linux"  # a torch this machine does not have: only the fake env matches


def _run(*cmd: str | Path) -> None:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    assert res.returncode == 0, f"{cmd}: {res.stderr}"


def _defs(names: list[str]) -> str:
    """C definitions of functions named by their mangled C++ names (asm labels)."""
    return "".join(f'void f{i}(void) __asm__("{n}"); void f{i}(void) {{}}\n' for i, n in enumerate(names))


def _stub(d: Path, soname: str, names: list[str], script: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "s.c").write_text(_defs(names))
    args = [f"-Wl,--version-script={d / 's.map'}"] if script else []
    if script:
        (d / "s.map").write_text(script)
    _run("gcc", "-shared", "-fPIC", "-o", d / soname, d / "s.c", f"-Wl,-soname,{soname}", *args)
    return d / soname


def _uses(names: list[str]) -> str:
    decls = "".join(f'extern void u{i}(void) __asm__("{n}");\n' for i, n in enumerate(names))
    return decls + "void use_all(void) {" + "".join(f" u{i}();" for i in range(len(names))) + " }\n"


class Libs(TypedDict):
    ext: Path
    pinned: Path
    link: tuple[str, ...]  # linker arguments


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Libs:
    d = tmp_path_factory.mktemp("imports")
    _stub(
        d / "sys",
        "libstdc++.so.6",
        [OLD, OSTRINGSTREAM, BAD_ARRAY, IOS_INIT],
        f"""GLIBCXX_3.4 {{ global: {OLD}; }};
            GLIBCXX_3.4.26 {{ global: {OSTRINGSTREAM}; }} GLIBCXX_3.4;
            GLIBCXX_3.4.29 {{ global: {BAD_ARRAY}; }} GLIBCXX_3.4.26;
            GLIBCXX_3.4.32 {{ global: {IOS_INIT}; }} GLIBCXX_3.4.29;""",
    )
    link_torch = _stub(d / "linktime", "libtorch_cpu.so", [OLD, OSTRINGSTREAM, BAD_ARRAY, IOS_INIT])
    _stub(d / "pinned" / "torch" / "lib", "libtorch_cpu.so", [OSTRINGSTREAM, BAD_ARRAY])
    # DT_RPATH (searched first) to the stub system library, so the test never depends on this host's libstdc++.
    link = (
        "-Wl,--no-as-needed",
        str(link_torch),
        str(d / "sys" / "libstdc++.so.6"),
        "-Wl,--disable-new-dtags",
        f"-Wl,-rpath,{d / 'sys'}",
    )
    (d / "ext.c").write_text(_uses([IOS_INIT, BAD_ARRAY, OSTRINGSTREAM, OLD]))
    _run("gcc", "-shared", "-fPIC", "-o", d / "ext.so", d / "ext.c", *link)
    return {"ext": d / "ext.so", "pinned": d / "pinned" / "torch" / "lib", "link": link}


def test_the_fixture_really_imports_them_unversioned(libs: Libs) -> None:
    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed (needed to prove what the fixture carries)")
    out = subprocess.run(["readelf", "-W", "--dyn-syms", libs["ext"]], capture_output=True, text=True).stdout
    for name in (IOS_INIT, BAD_ARRAY, OSTRINGSTREAM):
        [line] = [ln for ln in out.splitlines() if ln.rstrip().endswith(name) or f" {name}@" in ln]
        assert " UND " in line and "@" not in line.split()[-1], line


def test_pinned_torch_exports_two_of_them_and_the_third_fails(libs: Libs) -> None:
    rep = inspect_object(libs["ext"], (libs["pinned"],))
    assert rep is not None and not rep.error
    assert sorted(r.line() for r in rep.unversioned) == sorted(
        [
            f"{IOS_INIT} -> libstdc++.so.6 (GLIBCXX_3.4.32)",
            f"{BAD_ARRAY} -> libtorch_cpu.so [torch]",
            f"{OSTRINGSTREAM} -> libtorch_cpu.so [torch]",
            f"{OLD} -> libstdc++.so.6 (GLIBCXX_3.4)",
        ]
    )
    assert [t.line() for t in rep.too_new] == [
        f"{IOS_INIT} (unversioned; only a libstdc++.so.6 newer than manylinux_2_28's defines it "
        "(GLIBCXX_3.4.32 > GLIBCXX_3.4.24), and torch does not export it)"
    ]
    findings = check_symbols("v", [libs["ext"]], torch_lib_dirs=(libs["pinned"],))
    assert [(f.check, f.status) for f in findings] == [("symbols", FAIL), ("imports", PASS)]
    assert IOS_INIT in findings[0].message and BAD_ARRAY not in findings[0].message
    assert findings[1].message == "ext.so: 4 unversioned imports: 2 -> libtorch_cpu.so [torch], 2 -> libstdc++.so.6"
    assert len(findings[1].details) == 4 and findings[1].to_json()["details"] == list(findings[1].details)


def test_without_the_pinned_torch_nothing_proves_torch_exports_them(libs: Libs) -> None:
    rep = inspect_object(libs["ext"], ())
    assert rep is not None
    assert sorted(t.symbol for t in rep.too_new) == sorted([IOS_INIT, BAD_ARRAY, OSTRINGSTREAM])
    assert {t.why.split(" (")[1].split(" >")[0] for t in rep.too_new} == {
        "GLIBCXX_3.4.32",
        "GLIBCXX_3.4.29",
        "GLIBCXX_3.4.26",
    }
    # --host-toolchain waives the ceiling as for versioned imports (a warning, never for huggingface.co)
    findings = check_symbols("v", [libs["ext"]], host_toolchain_ok=True)
    assert [f.status for f in findings if f.check == "symbols"] == ["warn"]


def test_a_pinned_torch_exporting_all_of_them_passes(libs: Libs, tmp_path: Path) -> None:
    _stub(tmp_path / "torch" / "lib", "libtorch_cpu.so", [OSTRINGSTREAM, BAD_ARRAY, IOS_INIT])
    findings = check_symbols("v", [libs["ext"]], torch_lib_dirs=(tmp_path / "torch" / "lib",))
    assert [(f.check, f.status) for f in findings] == [("symbols", PASS), ("imports", PASS)]
    assert "3 -> libtorch_cpu.so [torch]" in findings[1].message


def _fake_env(envs: Path, libdir_src: Path) -> None:
    """A managed torch 2.13 (cu130) environment as the build creates them: version file and torch/lib."""
    site = envs / "torch213-cu130" / "lib" / "python3.11" / "site-packages"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "version.py").write_text("__version__ = '2.13.0+cu130'\ncuda = '13.0'\nhip = None\n")
    shutil.copytree(libdir_src, site / "torch" / "lib")
    (envs / "torch213-cu130" / "bin").mkdir(parents=True)
    (envs / "torch213-cu130" / "bin" / "python").write_text("")


def test_verify_resolves_against_the_variants_build_environment(
    libs: Libs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    envs = tmp_path / "envs"
    _fake_env(envs, libs["pinned"])
    monkeypatch.setenv("GGML_VENDOR_ENVS", str(envs))
    assert torch_lib_dirs(VARIANT) == (envs / "torch213-cu130/lib/python3.11/site-packages/torch/lib",)
    root = write_project(tmp_path / "proj")
    cfg, build = config.load(root), root / "build" / NAME
    v = make_variant(build, variant=VARIANT)
    meta = json.loads((v / "metadata.json").read_text())
    compile_so(v, meta["id"], fatbin=build_fatbin([[(80, "", False), (90, "", False)]]),
               extra_c=_uses([IOS_INIT, BAD_ARRAY]), link=libs["link"])  # fmt: skip
    write_metadata(v, ident=meta["id"], backend="cuda", archs=meta["backend"]["archs"], prov=meta["provenance"])
    report = verify_build(cfg, options=VerifyOptions(check_vendor=False, smoke=False, conformance=False))
    sym = [f for f in report.variants[0].findings if f.check == "symbols" and f.status == FAIL]
    assert len(sym) == 1 and IOS_INIT in sym[0].message and BAD_ARRAY not in sym[0].message
    [imports] = [f for f in report.variants[0].findings if f.check == "imports"]
    assert f"{BAD_ARRAY} -> libtorch_cpu.so [torch]" in imports.details
    doc = report.to_json()
    assert any(f.get("details") for f in doc["variants"][0]["findings"] if f["check"] == "imports")
