"""Real builds of the miniature kernel package with nvcc and the installed CUDA torch: the variant layout,
metadata, loading through kernels.get_local_kernel in a fresh process, the cache (a second build runs no
compiler), failure and Ctrl-C leaving build/ in its previous state. Skipped, with the reason, where nvcc or
a CUDA build of torch is missing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import BUILD_KERNEL_OUT, BUILD_KERNEL_SRC, built_variants, copy_build_kernel, render_source
from tests.helpers.machine import local_cuda_build_unavailable
from toolkit.build.torchenvs import discover_envs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "build_kernel"
pytestmark: pytest.MarkDecorator | list[pytest.MarkDecorator] = pytest.mark.slow

_SKIP = local_cuda_build_unavailable()
if _SKIP:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason=_SKIP)]


@pytest.fixture(scope="module", autouse=True)
def _own_provisioned_trees(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Torch environments provisioned in the user's cache (a torch 2.13 venv, aarch64 cross-build trees: they
    make more fixture rows buildable on this host) stay out of these tests: they see this interpreter's only."""
    old = os.environ.get("GGML_VENDOR_ENVS")
    os.environ["GGML_VENDOR_ENVS"] = str(tmp_path_factory.mktemp("provisioned") / "envs")
    yield
    if old is None:
        os.environ.pop("GGML_VENDOR_ENVS", None)
    else:
        os.environ["GGML_VENDOR_ENVS"] = old


def _cli(root: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "build", "-C", str(root), *args], capture_output=True, text=True, **kw
    )


def _host_variant() -> str:
    env = next(e for e in discover_envs() if not e.managed)
    return f"torch{env.torch_minor.replace('.', '')}-cxx11-{env.compute}-x86_64-linux"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("build") / "proj"
    copy_build_kernel(root)
    res = _cli(root, "--json", "-j", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    return root, json.loads(res.stdout)


def test_host_variant_layout_and_metadata(built: tuple[Path, dict[str, Any]]) -> None:
    root, report = built
    [r] = report["variants"]
    assert r["name"] == _host_variant() and r["result"] == "built"
    out = root / r["out_dir"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["metadata.json", "__init__.py", "_ops.py", f"{r['id']}.abi3.so"]
    )
    meta = json.loads((out / "metadata.json").read_text())
    from toolkit.core.kernels_client import kernels_types

    Digest, DigestAlgorithm, Metadata = kernels_types("Digest", "DigestAlgorithm", "Metadata")

    Metadata.from_bytes((out / "metadata.json").read_bytes())
    assert meta["id"] == r["id"] and meta["backend"] == {"type": "cuda", "archs": ["8.0"]}
    assert meta["digest"]["files"] == Digest.hash_variant(DigestAlgorithm.SHA256, str(out)).files
    assert report["compiler_invocations"] == 4  # nvcc object, glibc compat object, binding, link


def test_so_exports_its_init_and_has_no_rpath(built: tuple[Path, dict[str, Any]]) -> None:
    root, report = built
    [r] = report["variants"]
    so = root / r["out_dir"] / f"{r['id']}.abi3.so"
    dyn = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    if not dyn:
        pytest.skip("readelf is not installed")
    assert "RPATH" not in dyn and "RUNPATH" not in dyn
    from kernel_abi_check import ObjectFile

    # The glibc compat object keeps __libc_single_threaded (glibc 2.32) out of the imports. Full
    # manylinux_2_28 compliance depends on the host toolchain (a newer glibc's headers redirect e.g. strtol
    # to __isoc23_strtol@2.38); verify reports that, and Hub builds use a manylinux_2_28 toolchain.
    bad = {v.name for v in ObjectFile(str(so)).check_manylinux("manylinux_2_28")}
    assert "__libc_single_threaded" not in bad
    assert ObjectFile(str(so)).check_python_abi("3.9") == []
    assert "libtorch.so" in dyn and "libcudart.so" in dyn
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    exported = [line.split()[-1] for line in syms.splitlines()]
    assert f"PyInit_{r['id']}" in exported
    # -fvisibility=hidden: the vendored kernel's host function does not leak out of the extension
    assert not any("mini_revision" in s or "mini_scale_launch" in s for s in exported)


def test_loads_with_get_local_kernel_in_a_fresh_process(built: tuple[Path, dict[str, Any]]) -> None:
    root, report = built
    [r] = report["variants"]
    code = (
        "import sys, torch; from pathlib import Path; import kernels\n"
        "k = kernels.get_local_kernel(Path(sys.argv[1]) / 'build' / 'mini-kernel')\n"
        "print(k.__name__, k.revision(), k.ops.scale.default.name() if hasattr(k, 'ops') else '')\n"
        "import json; print(json.dumps(str(getattr(torch.ops, k.__name__).scale.default._schema)))\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0].split()
    assert first[0] == r["id"]
    assert first[1] == "7"  # MINI_REVISION from the vendored header, via the torch-independent object
    assert "scale(Tensor x, float s) -> Tensor" in res.stdout


def test_an_exception_thrown_inside_the_extension_reaches_python(built: tuple[Path, dict[str, Any]]) -> None:
    """No GPU needed: scale() on a CPU tensor fails its TORCH_CHECK inside the extension. The C++ exception must
    unwind through the extension's frames (its landing pads call _Unwind_Resume) and arrive as a RuntimeError;
    an extension carrying a private unwinder dies with SIGSEGV/SIGABRT here instead."""
    root, report = built
    [r] = report["variants"]
    code = (
        "import sys, torch; from pathlib import Path; import kernels\n"
        "k = kernels.get_local_kernel(Path(sys.argv[1]) / 'build' / 'mini-kernel')\n"
        "for _ in range(3):\n"
        "    try:\n"
        "        getattr(torch.ops, k.__name__).scale(torch.ones(4), 2.0)\n"
        "    except RuntimeError as e:\n"
        "        print('CAUGHT', str(e).splitlines()[0])\n"
        "print('ALIVE')\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True)
    assert res.returncode == 0, f"exit {res.returncode} (negative: killed by that signal): {res.stderr[-2000:]}"
    lines = res.stdout.splitlines()
    assert lines.count("CAUGHT scale: x must be a contiguous float32 CUDA tensor") == 3, res.stdout
    assert lines[-1] == "ALIVE"
    # and verify's own reading of the binary agrees: imports within manylinux_2_28 aside, no private unwinder
    from toolkit.verify.symvers import inspect_object

    rep = inspect_object(root / r["out_dir"] / f"{r['id']}.abi3.so")
    assert rep is not None and rep.unwinder == () and not rep.error


def test_second_build_is_a_cache_hit_with_no_compiler(built: tuple[Path, dict[str, Any]]) -> None:
    root, report = built
    out = root / report["variants"][0]["out_dir"]
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    res = _cli(root, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["compiler_invocations"] == 0 and doc["variants"][0]["result"] == "up-to-date"
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_build_all_after_the_host_build_is_a_cache_hit_and_reports_the_rest(built: tuple[Path, dict[str, Any]]) -> None:
    root, report = built
    from toolkit.build.matrix import load_matrix

    names = {v.name for v in load_matrix(root / "variants" / "matrix.toml").variants}
    if _host_variant() not in names:
        pytest.skip(f"this host's variant {_host_variant()} is not in the fixture matrix")
    res = _cli(root, "--all", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["compiler_invocations"] == 0
    results = {v["name"]: v for v in doc["variants"]}
    assert set(results) == names
    assert results[_host_variant()]["result"] == "up-to-date"
    for name, v in results.items():
        if name != _host_variant():
            assert v["result"] == "skipped" and v["reason"], v
            assert v["engine"].startswith("github-actions "), v  # the summary names who builds it instead


def test_edited_variant_dir_is_rebuilt_from_cache_without_compiling(built: tuple[Path, dict[str, Any]]) -> None:
    root, report = built
    out = root / report["variants"][0]["out_dir"]
    (out / "__init__.py").write_text("# tampered\n")
    doc = json.loads(_cli(root, "--json").stdout)
    assert doc["variants"][0]["result"] == "built" and doc["compiler_invocations"] == 0
    assert (out / "__init__.py").read_text() == (
        root / BUILD_KERNEL_SRC / "torch-ext" / "mini_kernel" / "__init__.py"
    ).read_text()


def test_vendored_header_change_recompiles_object_and_renames_namespace(
    built: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, report = built
    proj = tmp_path / "p"
    shutil.copytree(root, proj, ignore=shutil.ignore_patterns("build"))  # keeps .cache: warm cache
    render_source(proj)
    hdr = proj / "vendor" / "ggml" / "src" / "ggml-cuda" / "mini.cuh"
    hdr.write_text(hdr.read_text().replace("#define MINI_REVISION 7", "#define MINI_REVISION 8"))
    res = _cli(proj, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["per_tool"].get("nvcc") == 1  # the edited header's object is rebuilt
    assert doc["variants"][0]["id"] != report["variants"][0]["id"]
    meta = json.loads((proj / doc["variants"][0]["out_dir"] / "metadata.json").read_text())
    assert meta["provenance"]["ggml-vendor"]["dirty"] is True  # vendor/ no longer matches the lock


def test_failed_build_keeps_previous_variant_and_shows_the_error(
    built: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    root, report = built
    proj = tmp_path / "p"
    shutil.copytree(root, proj)
    out = proj / report["variants"][0]["out_dir"]
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    cu = proj / BUILD_KERNEL_SRC / "csrc" / "cuda" / "scale.cu"
    cu.write_text(cu.read_text() + "\nthis is not C++;\n")
    res = _cli(proj, "-j", "1")  # the object fails first; the binding of the doomed variant is not compiled
    assert res.returncode == 7, res.stdout + res.stderr
    assert "scale.cu" in res.stderr and "error" in res.stderr  # the failing step's tail
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not list((proj / BUILD_KERNEL_OUT).glob(".*"))  # no staging left behind
    log = proj / ".cache" / "build" / "logs" / f"{report['variants'][0]['name']}.log"
    assert "this is not C++" in log.read_text()
    assert "1 compiler invocation(s)" in res.stdout  # fail fast: nothing else compiled for a failed variant


def test_ctrl_c_leaves_no_half_written_variant(tmp_path: Path) -> None:
    proj = tmp_path / "p"
    copy_build_kernel(proj)
    env = dict(os.environ, GGML_VENDOR_BUILD_CACHE=str(tmp_path / "cold-cache"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit.cli", "build", "-C", str(proj)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    tmp_dir = tmp_path / "cold-cache" / "tmp"
    while time.monotonic() < deadline and not (tmp_dir.is_dir() and any(tmp_dir.iterdir())):
        time.sleep(0.1)  # wait until a compiler is running
    assert tmp_dir.is_dir(), "the build never started compiling"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert built_variants(proj) == []  # build/mini-kernel/ holds its rendered src/ alone
    assert not any(tmp_dir.iterdir())  # compiler scratch cleaned up


def test_two_clean_builds_at_different_paths_are_byte_identical_stripped_and_path_free(tmp_path: Path) -> None:
    """Issue 20 item 8: what ships carries no debug info and names no builder path (project, torch, python,
    toolkit, cache, nvcc's tmpxft files); two clean builds of one tree, in two directories, are identical."""
    sos = []
    for name in ("one", "second-tree"):
        proj = tmp_path / name
        copy_build_kernel(proj)
        res = _cli(proj, "--json", "-j", "2")
        assert res.returncode == 0, res.stdout + res.stderr
        [r] = json.loads(res.stdout)["variants"]
        sos.append((proj, proj / r["out_dir"] / f"{r['id']}.abi3.so"))
    data = [so.read_bytes() for _, so in sos]
    assert data[0] == data[1], "two clean builds of one tree differ"
    import torch

    leaks = [str(tmp_path), os.path.dirname(torch.__file__), sys.prefix, "tmpxft", str(Path.home())]
    assert [p for p in leaks if p.encode() in data[0]] == []
    sections = subprocess.run(["readelf", "-S", "-W", str(sos[0][1])], capture_output=True, text=True).stdout
    if not sections:
        pytest.skip("readelf is not installed")
    assert ".debug_" not in sections and ".symtab" not in sections, sections
