"""verify's stable-ABI check on binaries we compile here: planted torch C++ imports are refused by name, an object
importing only the C shim passes. The fixtures are tiny C files of ours (asm labels give them mangled names)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from toolkit.verify.findings import FAIL, PASS
from toolkit.verify.stable_abi import check_stable_abi, dynamic_imports, offending_import

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed: fixtures cannot be built")

STABLE = "torch-stable-abi210-cu130-x86_64-linux"
C10_CHECK = "_ZN3c106detail14torchCheckFailEPKcS2_jS2_"  # c10::detail::torchCheckFail(...)
AT_EMPTY = "_ZN2at5emptyEN3c108ArrayRefIlEENS0_13TensorOptionsE"  # at::empty(...)
THP_WRAP = "_Z16THPVariable_WrapRKN2at10TensorBaseE"  # libtorch_python
STABLE_CXX = "_ZN5torch6stable6detail3fooEv"  # torch::stable:: (the stable API's own)
SHIM = ("aoti_torch_get_dim", "aoti_torch_empty_strided", "torch_call_dispatcher")


def _so(tmp: Path, name: str, imports: tuple[str, ...]) -> Path:
    """A shared object whose one function calls `imports` (left undefined, so they are dynamic imports)."""
    decls = "".join(f'extern void u{i}(void) __asm__("{n}");\n' for i, n in enumerate(imports))
    body = "void use_all(void) {" + "".join(f" u{i}();" for i in range(len(imports))) + " }\n"
    src = tmp / f"{name}.c"
    src.write_text(decls + body)
    out = tmp / f"{name}.so"
    res = subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return out


def test_the_fixture_really_imports_what_it_plants(tmp_path: Path) -> None:
    names, _ = dynamic_imports(_so(tmp_path, "planted", (C10_CHECK, *SHIM)))
    assert C10_CHECK in names and set(SHIM) <= set(names)


def test_only_the_c_shim_is_reported_stable(tmp_path: Path) -> None:
    findings = check_stable_abi(STABLE, [_so(tmp_path, "shim", SHIM)])
    assert [f.status for f in findings] == [PASS]


@pytest.mark.parametrize(
    ("planted", "what"),
    [(C10_CHECK, "c10::"), (AT_EMPTY, "at::"), (THP_WRAP, "libtorch_python")],
)
def test_a_planted_torch_import_is_refused_by_name(tmp_path: Path, planted: str, what: str) -> None:
    findings = check_stable_abi(STABLE, [_so(tmp_path, "bad", (*SHIM, planted))])
    assert [f.status for f in findings] == [FAIL]
    assert planted in findings[0].message and what in findings[0].message
    assert "\n" not in findings[0].message


def test_a_link_to_libtorch_python_is_refused(tmp_path: Path) -> None:
    dep = tmp_path / "libtorch_python.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(dep), "-x", "c", "/dev/null"], check=True)
    src = tmp_path / "user.c"
    src.write_text("void f(void) {}\n")
    so = tmp_path / "user.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(so), str(src), f"-L{tmp_path}", "-Wl,--no-as-needed", "-ltorch_python"],
        check=True,
    )
    findings = check_stable_abi(STABLE, [so])
    assert [f.status for f in findings] == [FAIL] and "libtorch_python.so" in findings[0].message


def test_the_stable_apis_own_namespace_and_lookalikes_pass() -> None:
    assert offending_import(STABLE_CXX) is None
    assert offending_import("_ZNSt6atomicIiE5storeEi") is None  # std::atomic: "6atomic", not at::
    assert offending_import("_ZN12atomic_thing1fEv") is None  # a 12-letter name that starts with "at"
    assert offending_import("_ZNSt6vectorIN3c106IValueESaIS1_EE9push_backEv") is not None  # c10 in a template arg


def test_per_torch_variants_are_not_judged(tmp_path: Path) -> None:
    assert check_stable_abi("torch214-cxx11-cu130-x86_64-linux", [_so(tmp_path, "pt", (C10_CHECK,))]) == []
