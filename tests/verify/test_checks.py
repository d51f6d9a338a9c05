"""verify: each check passes on a good fixture variant and fails, with a clear message, on a broken one."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

from tests.helpers import metallib_fixture
from tests.helpers.hubserver.variants import (
    FAKE_UPSTREAM_COMMIT,
    NAME,
    build_fatbin,
    compile_so,
    host_variant_name,
    make_variant,
    provenance,
    write_metadata,
    write_project,
)
from toolkit.core import config
from toolkit.core.config import Config
from toolkit.core.errors import VerifyError
from toolkit.verify import FAIL, PASS, SKIP, VerifyOptions, stamp_verdict, verify_build
from toolkit.verify.archs import caps_of, check_archs, cuda_targets_of, parse_caps, parse_fatbin_section
from toolkit.verify.binaries import check_gitattributes, gitattributes_covers, gitattributes_text
from toolkit.verify.findings import Finding, VerifyReport
from toolkit.verify.metal import check_metal, required_kernels

NO_VENDOR = VerifyOptions(check_vendor=False, smoke=False)


def _project(tmp_path: Path) -> tuple[Config, Path]:
    root = write_project(tmp_path / "proj")
    return config.load(root), root / "build" / NAME


def _by_check(report: VerifyReport, check: str, variant: str | None = None) -> list[Finding]:
    return [f for v in report.variants if variant in (None, v.variant) for f in v.findings if f.check == check]


def _status(report: VerifyReport, check: str) -> set[str]:
    return {f.status for f in _by_check(report, check)}


def test_good_variant_passes_every_check_including_the_import(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build)
    report = verify_build(cfg, options=VerifyOptions(check_vendor=False, smoke=True))
    assert report.ok, [f.line() for f in report.failures()]
    for check in ("layout", "metadata", "digest", "binaries", "archs", "abi", "provenance"):
        assert _status(report, check) == {PASS}, check
    smoke = _by_check(report, "smoke")
    # The smoke test runs whenever kernels' resolver accepts the variant on this host (a CUDA torch here).
    assert smoke and smoke[0].status in (PASS, SKIP)
    if smoke[0].status == PASS:
        assert "1 ops under" in smoke[0].message
    assert stamp_verdict(build, build / host_variant_name()) == (True, "")
    assert not list((build / host_variant_name()).rglob("__pycache__")), "the smoke test left bytecode behind"


def test_stamp_goes_stale_when_a_file_changes(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    v = make_variant(build)
    verify_build(cfg, options=NO_VENDOR)
    (v / "_ops.py").write_text((v / "_ops.py").read_text() + "# edited\n")
    ok, why = stamp_verdict(build, v)
    assert not ok and "changed since" in why


def test_archs_must_equal_the_cubins_inside(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    # metadata claims 8.0 and 9.0, the binary only carries sm_80
    make_variant(build, archs=["8.0", "9.0"], fatbin_targets=[[(80, "", False)]])
    report = verify_build(cfg, options=NO_VENDOR)
    archs = _by_check(report, "archs")
    assert archs[0].status == FAIL
    assert "declared but not in the binary: sm_90" in archs[0].message
    assert "['8.0']" in archs[0].remedy
    assert not report.ok


def test_archs_undeclared_ptx_and_suffixes_are_reported(tmp_path: Path) -> None:
    fatbin = build_fatbin(
        [[(90, "a", False), (100, "f", False), (120, "", False), (120, "", True)], [(90, "a", False)]]
    )
    contents = parse_fatbin_section(fatbin)
    assert len(contents.containers) == 2
    assert caps_of(contents.targets) == ["9.0a", "10.0f", "12.0+PTX"]
    wanted, bad = parse_caps(["9.0a", "10.0f", "12.0+PTX"])
    assert not bad and wanted == set(contents.targets)
    so = compile_so(tmp_path, "_m_cuda_x", fatbin=fatbin)
    good = check_archs("v", "cuda", ["9.0a", "10.0f", "12.0+PTX"], [so])
    assert good[0].status == PASS
    # The second translation unit lacks sm_100f/sm_120: a launch there would fail on those GPUs.
    assert any(f.status == "warn" and "translation units" in f.message for f in good)
    missing_ptx = check_archs("v", "cuda", ["9.0a", "10.0f", "12.0"], [so])
    assert missing_ptx[0].status == FAIL and "in the binary but not declared: compute_120" in missing_ptx[0].message
    assert check_archs("v", "cuda", ["sm_90"], [so])[0].status == FAIL
    assert check_archs("v", "cuda", [], [so])[0].status == FAIL


def test_archs_no_device_code_at_all(tmp_path: Path) -> None:
    so = compile_so(tmp_path, "_m_cuda_y")
    f = check_archs("v", "cuda", ["9.0"], [so])
    assert f[0].status == FAIL and "no .nv_fatbin" in f[0].message


@pytest.mark.slow
def test_fatbin_parser_reads_real_nvcc_output(tmp_path: Path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the parser is only checked against constructed fatbins")
    so = compile_so(
        tmp_path,
        "_m_cuda_z",
        compiler="nvcc",
        gencode=(
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90a,code=sm_90a",
            "-gencode",
            "arch=compute_90,code=compute_90",
            "-gencode",
            "arch=compute_100f,code=sm_100f",
        ),
    )
    contents = cuda_targets_of(so.read_bytes())
    assert contents is not None
    targets = contents.targets
    assert sorted(t.nvcc_name() for t in targets) == ["compute_90", "sm_100f", "sm_80", "sm_90a"]
    assert caps_of(targets) == ["8.0", "9.0a", "10.0f", "9.0+PTX (PTX only)"]


@pytest.mark.slow
def test_nvcc_variant_verifies_and_static_cudart_fails_manylinux(tmp_path: Path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    cfg, build = _project(tmp_path)
    gencode = ("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]")
    make_variant(build, compiler="nvcc", gencode=gencode, archs=["8.0", "9.0+PTX"])
    report = verify_build(cfg, options=NO_VENDOR)
    assert report.ok, [f.line() for f in report.failures()]
    # Static cudart drags in glibc 2.34 symbols on a modern host: exactly what manylinux_2_28 forbids.
    make_variant(build, compiler="nvcc", gencode=gencode, archs=["8.0", "9.0+PTX"], static_cudart=True, uid="fxstat")
    report = verify_build(cfg, options=NO_VENDOR)
    abi = _by_check(report, "abi")
    assert abi[0].status == FAIL and "manylinux_2_28" in abi[0].message and "GLIBC_2.3" in abi[0].message
    assert "-cudart shared" in abi[0].remedy


def test_lfs_pointer_stub_instead_of_the_binary(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    v = make_variant(build)
    so = next(v.glob("*.so"))
    so.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "a" * 64 + "\nsize 15568\n")
    write_metadata(v, ident=so.name.split(".")[0], backend="cuda", archs=["8.0", "9.0"])  # digest of the stub
    report = verify_build(cfg, options=VerifyOptions(check_vendor=False, smoke=True))
    binaries = _by_check(report, "binaries")
    assert binaries[0].status == FAIL and "Git LFS pointer stub" in binaries[0].message
    assert _by_check(report, "smoke")[0].status == SKIP  # not attempted on a stub
    assert not report.ok


def test_names_must_agree(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    v = make_variant(build)
    so = next(v.glob("*.so"))
    so.rename(v / "_ggml_attn_kernels_cuda_other.abi3.so")
    write_metadata(v, ident="_ggml_attn_kernels_cuda_fx00001", backend="cuda", archs=["8.0", "9.0"])
    report = verify_build(cfg, options=NO_VENDOR)
    msgs = " | ".join(f.message for f in _by_check(report, "layout") if f.status == FAIL)
    assert "expected exactly one shared object _ggml_attn_kernels_cuda_fx00001.abi3.so" in msgs


def test_id_must_follow_module_backend_uid(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build, module="wrong_module")
    report = verify_build(cfg, options=NO_VENDOR)
    msgs = " | ".join(f.message for f in _by_check(report, "layout") if f.status == FAIL)
    assert "is not _ggml_attn_kernels_cuda_<uid>" in msgs


def test_variant_name_and_backend_must_agree(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build, variant="torch214-cxx11-rocm72-x86_64-linux")  # CUDA build under a ROCm name
    report = verify_build(cfg, options=NO_VENDOR)
    msgs = " | ".join(f.message for f in _by_check(report, "layout") if f.status == FAIL)
    assert "variant name says backend rocm but metadata backend.type is cuda" in msgs


def test_digest_detects_edits_after_the_build(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    v = make_variant(build)
    (v / "__init__.py").write_text((v / "__init__.py").read_text() + "\n# patched by hand\n")
    report = verify_build(cfg, options=NO_VENDOR)
    d = _by_check(report, "digest")
    assert d[0].status == FAIL and "changed: __init__.py" in d[0].message


def test_metadata_rejected_by_kernels_parser_and_wrong_version(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    v = make_variant(build)
    meta = json.loads((v / "metadata.json").read_text())
    del meta["backend"]
    (v / "metadata.json").write_text(json.dumps(meta))
    report = verify_build(cfg, options=NO_VENDOR)
    m = _by_check(report, "metadata")
    assert m[0].status == FAIL and "kernels' parser rejects metadata.json" in m[0].message
    make_variant(build, version=2)
    report = verify_build(cfg, options=NO_VENDOR)
    assert any("version 2 != configured major version 1" in f.message for f in _by_check(report, "metadata"))


def test_dirty_and_stale_provenance(tmp_path: Path) -> None:
    from toolkit.core.lock import Lock, render_lock

    cfg, build = _project(tmp_path)
    make_variant(build, prov=provenance(dirty=True))
    report = verify_build(cfg, options=NO_VENDOR)
    assert any("dirty tree" in f.message for f in _by_check(report, "provenance") if f.status == FAIL)
    # A lock that pins another commit than the build came from.
    vendor = cfg.root / "vendor"
    vendor.mkdir()
    (vendor / "UPSTREAM").write_text(
        render_lock(
            Lock(
                upstream="https://github.com/ggml-org/ggml",
                layout="ggml",
                commit="1" * 40,
                rev="master",
                date="",
                subject="",
                tool_version="0.1.0",
                files={},
            )
        )
    )
    make_variant(build)
    report = verify_build(cfg, options=VerifyOptions(smoke=False))
    prov = [f for f in _by_check(report, "provenance") if f.status == FAIL]
    assert (
        prov
        and f"built from upstream {FAKE_UPSTREAM_COMMIT[:12]} but vendor/UPSTREAM pins 111111111111" in prov[0].message
    )
    assert {f.status for f in report.global_findings if f.check == "vendor"} == {PASS}


def test_dirty_vendor_tree_fails(tmp_path: Path) -> None:
    from toolkit.core.lock import Lock, render_lock

    cfg, build = _project(tmp_path)
    make_variant(build)
    vendor = cfg.root / "vendor"
    (vendor / "ggml").mkdir(parents=True)
    (vendor / "ggml" / "stray.cu").write_text("// not in the lock\n")
    (vendor / "UPSTREAM").write_text(
        render_lock(
            Lock(
                upstream="u",
                layout="ggml",
                commit=FAKE_UPSTREAM_COMMIT,
                rev="",
                date="",
                subject="",
                tool_version="0.1.0",
                files={},
            )
        )
    )
    report = verify_build(cfg, options=VerifyOptions(smoke=False))
    g = [f for f in report.global_findings if f.check == "vendor"]
    assert g[0].status == FAIL and "vendor/ is dirty" in g[0].message and "stray.cu" in g[0].message
    assert not report.ok


def test_missing_lock_fails(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build)
    report = verify_build(cfg, options=VerifyOptions(smoke=False))
    assert any(f.status == FAIL and "vendor/UPSTREAM is missing" in f.message for f in report.global_findings)


def test_mixed_versions_fail(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build)
    make_variant(build, variant="torch213-cxx11-cu130-x86_64-linux", version=2, uid="fx00002")
    report = verify_build(cfg, options=NO_VENDOR)
    mixed = [f for f in report.global_findings if f.check == "versions"]
    assert mixed and mixed[0].status == FAIL and "v1:" in mixed[0].message and "v2:" in mixed[0].message


def test_unknown_variant_is_a_clear_error(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build)
    with pytest.raises(VerifyError, match="no variant 'torch999'.*known variants: torch"):
        verify_build(cfg, ["torch999"], options=NO_VENDOR)


# --- metallib ------------------------------------------------------------------------------------------


def _macho_with(payload: bytes, minos: tuple[int, int]) -> bytes:
    """A minimal arm64 Mach-O header with LC_BUILD_VERSION, followed by `payload` (embedded bytes)."""
    lc = struct.pack("<IIIIII", 0x32, 24, 1, (minos[0] << 16) | (minos[1] << 8), 26 << 16, 0)
    header = struct.pack("<IiiIIIII", 0xFEEDFACF, 0x0100000C, 0, 6, 1, len(lc), 0, 0)
    return header + lc + bytes(64) + payload


def test_metallib_embedded_in_the_binary(tmp_path: Path) -> None:

    v = tmp_path / "torch214-metal-aarch64-darwin"
    v.mkdir()
    names = ("kernel_a", "kernel_b")
    so = v / "_m_metal_x.abi3.so"
    so.write_bytes(_macho_with(metallib_fixture.build_fixture(names, language_version=(4, 0)), (26, 0)))
    ok = check_metal(v.name, v, "metal", [so], names)
    assert [f.status for f in ok] == [PASS] and "loads on macOS 26.0" in ok[0].message
    missing = check_metal(v.name, v, "metal", [so], names + ("kernel_c",))
    assert missing[0].status == FAIL and "kernel_c" in missing[0].message
    # Metal 4.0 does not load on macOS 15: a variant declaring minos 15.0 must be refused.
    so.write_bytes(_macho_with(metallib_fixture.build_fixture(names, language_version=(4, 0)), (15, 0)))
    old = check_metal(v.name, v, "metal", [so], names)
    assert any(f.status == FAIL and "needs macOS 26" in f.message for f in old)


def test_metallib_file_and_absence(tmp_path: Path) -> None:

    v = tmp_path / "torch214-metal-aarch64-darwin"
    v.mkdir()
    so = v / "_m_metal_x.abi3.so"
    so.write_bytes(_macho_with(b"", (26, 0)))
    none = check_metal(v.name, v, "metal", [so], ("k",))
    assert none[0].status == FAIL and "no metallib" in none[0].message
    (v / "lib.metallib").write_bytes(metallib_fixture.build_fixture(("k",)))
    assert check_metal(v.name, v, "metal", [so], ("k",))[0].status == PASS
    (v / "lib.metallib").write_bytes(b"MTLB" + bytes(10))
    assert check_metal(v.name, v, "metal", [so], ("k",))[0].status == FAIL
    assert check_metal(v.name, v, "cuda", [so]) == []


def test_required_metal_kernels_come_from_the_facts(repo_root: Path) -> None:
    names = required_kernels(config.load(repo_root))
    assert "kernel_gated_delta_net_f32_1" in names and "kernel_gated_delta_net_f32_4" in names
    assert "kernel_flash_attn_ext_vec_reduce" in names and "kernel_flash_attn_ext_pad" in names
    assert any(n.startswith("kernel_flash_attn_ext_vec_f16_dk128_dv128") for n in names)


# --- .gitattributes ----------------------------------------------------------------------------------


def test_gitattributes_coverage() -> None:
    assert check_gitattributes(None)[0].status == FAIL
    partial = "*.so filter=lfs diff=lfs merge=lfs -text\n"
    f = check_gitattributes(partial)
    assert f[0].status == FAIL and "*.dylib" in f[0].message and "*.metallib" in f[0].message
    full = gitattributes_text(partial)
    assert full.startswith(partial) and check_gitattributes(full)[0].status == PASS
    assert gitattributes_text(full) == full  # idempotent
    assert gitattributes_covers(full, "build/torch214-metal-aarch64-darwin/x.metallib")
    assert not gitattributes_covers(full + "*.so -filter\n", "build/v/x.so")
    assert not gitattributes_covers(full, "build/v/x.py")


# --- CLI -----------------------------------------------------------------------------------------------


def test_cli_json_and_exit_code(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build, archs=["8.0", "9.0"], fatbin_targets=[[(80, "", False)]])
    proc = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "verify", "-C", str(cfg.root), "--json", "--no-smoke"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 8, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False
    assert any(f["check"] == "archs" and f["status"] == "fail" for v in doc["variants"] for f in v["findings"])
    assert "error:" in proc.stderr and "check(s) failed" in proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "link-out", "link-in", "linked-dir", "variant-link"])
def test_entries_that_are_not_regular_files_fail_without_being_opened(tmp_path: Path, kind: str) -> None:
    """Issue 33 item 6: as collect does, verify refuses a variant holding a named pipe or a symbolic link
    (one to a file outside the project above all), or a build/<variant> that is itself a link to a directory
    elsewhere; the pipe is never opened (the CLI would hang)."""
    import os

    cfg, build = _project(tmp_path)
    vd = make_variant(build)
    secret = tmp_path / "outside-secret.txt"
    secret.write_text("not the variant's\n")
    expected = {
        "fifo": "extra.bin is a named pipe",
        "link-out": f"__init__.py is a symbolic link to {str(secret)!r}, outside the variant",
        "link-in": "alias.py is a symbolic link to '__init__.py'",
        "linked-dir": "sub is a symbolic link to",
        "variant-link": f"{vd.name} itself is a symbolic link to {str(tmp_path / 'elsewhere' / vd.name)!r}",
    }[kind]
    if kind == "fifo":
        os.mkfifo(vd / "extra.bin")
    elif kind == "link-out":
        secret.write_bytes((vd / "__init__.py").read_bytes())  # the same bytes: only the entry's kind differs
        (vd / "__init__.py").unlink()
        (vd / "__init__.py").symlink_to(secret)
    elif kind == "link-in":
        (vd / "alias.py").symlink_to("__init__.py")
    elif kind == "linked-dir":
        (vd / "sub").symlink_to(tmp_path)
    else:  # the variant's files are all regular, in a directory outside build/
        (tmp_path / "elsewhere").mkdir()
        shutil.move(vd, tmp_path / "elsewhere" / vd.name)
        vd.symlink_to(tmp_path / "elsewhere" / vd.name)
    proc = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "verify", "-C", str(cfg.root), "--json", "--no-smoke"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 8, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    [entries] = [f for v in doc["variants"] for f in v["findings"] if f["check"] == "entries"]
    assert entries["status"] == "fail" and expected in entries["message"], entries
    assert stamp_verdict(build, vd)[0] is False


@pytest.mark.slow
def test_host_toolchain_abi_is_a_warning_only_when_asked_and_never_for_huggingface_co(tmp_path: Path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH (static cudart is how this test gets glibc > 2.28 symbols)")
    from toolkit.core.errors import PublishError
    from toolkit.publish.preflight import preflight

    cfg, build = _project(tmp_path)
    v = make_variant(
        build,
        compiler="nvcc",
        gencode=("-gencode", "arch=compute_80,code=sm_80"),
        archs=["8.0"],
        static_cudart=True,
        uid="fxhost",
    )
    assert not verify_build(cfg, options=NO_VENDOR).ok
    report = verify_build(cfg, options=VerifyOptions(check_vendor=False, smoke=False, host_toolchain_ok=True))
    assert report.ok and _by_check(report, "abi")[0].status == "warn"
    assert stamp_verdict(build, v) == (True, "")
    ok, why = stamp_verdict(build, v, official_hub=True)
    assert not ok and "not for huggingface.co" in why
    with pytest.raises(PublishError, match="not for huggingface.co"):
        preflight(cfg, None, check_vendor=False, official_hub=True)
    assert preflight(cfg, None, check_vendor=False).variant_dirs == (v,)


def _offload_bundle(triples: list[str]) -> bytes:
    """An uncompressed clang offload bundle (what hipcc puts in .hip_fatbin), laid out per clang's format."""
    head = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(triples))
    entries = b""
    payload_at = len(head) + sum(24 + len(t) for t in triples)
    for t in triples:
        entries += struct.pack("<QQQ", payload_at, 4, len(t)) + t.encode()
        payload_at += 4
    return head + entries + b"\0\0\0\0" * len(triples)


def test_rocm_archs_from_the_offload_bundle(tmp_path: Path) -> None:
    bundle = _offload_bundle(
        [
            "host-x86_64-unknown-linux-gnu-",
            "hipv4-amdgcn-amd-amdhsa--gfx942",
            "hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-",
        ]
    )
    arr = ",".join(str(b) for b in bundle)
    so = compile_so(
        tmp_path,
        "_m_rocm_x",
        extra_c=f'__attribute__((used, section(".hip_fatbin"))) static const unsigned char hipfb[] = {{{arr}}};\n',
    )
    assert check_archs("v", "rocm", ["gfx90a", "gfx942"], [so])[0].status == PASS
    bad = check_archs("v", "rocm", ["gfx942", "gfx1100"], [so])
    assert bad[0].status == FAIL and "['gfx90a', 'gfx942']" in bad[0].message
    assert check_archs("v", "metal", None, [so])[0].status == SKIP


@pytest.mark.parametrize(
    ("minver", "expect"),
    [
        (None, "has no kernels-minver"),
        ("0.18.0", "newer than the oldest supported client 0.17.2"),
        ("9.0.0", "newer than the kernels installed here"),
    ],
)
def test_kernels_minver_must_be_honest(tmp_path: Path, minver: str | None, expect: str) -> None:
    # Clients from 0.18 refuse a variant whose minver is above them: a minver above the oldest client we support
    # silently drops its users; a missing one lets an older client load what it cannot run.
    cfg, build = _project(tmp_path)
    path = make_variant(build)
    meta = json.loads((path / "metadata.json").read_text())
    if minver is None:
        meta.pop("kernels-minver")
    else:
        meta["kernels-minver"] = minver
    (path / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
    report = verify_build(cfg, options=NO_VENDOR)
    msgs = [f.message for f in _by_check(report, "metadata") if f.status == FAIL]
    assert any(expect in m for m in msgs), msgs


def test_a_tampered_variant_fails_verify_in_one_line_and_the_clients_load(tmp_path: Path) -> None:
    # From kernels 0.18 every load hashes the variant against metadata.json's digest and raises on a mismatch:
    # verify's digest check says the same thing first, in one line naming the file.
    kernels = pytest.importorskip("kernels", reason="kernels is not installed")
    cfg, build = _project(tmp_path)
    v = make_variant(build)
    (v / "_ops.py").write_text((v / "_ops.py").read_text() + "\n# tampered\n")
    report = verify_build(cfg, options=NO_VENDOR)
    (d,) = _by_check(report, "digest")
    assert d.status == FAIL and "changed: _ops.py" in d.message and "\n" not in d.line()
    from packaging.version import Version

    if Version(kernels.__version__) < Version("0.18"):
        pytest.skip(f"kernels {kernels.__version__} does not check digests on load (0.18 does)")
    code = "import sys, kernels; from pathlib import Path; kernels.get_local_kernel(Path(sys.argv[1]))"
    proc = subprocess.run([sys.executable, "-c", code, str(v)], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "digest" in proc.stderr.lower(), proc.stderr[-2000:]


def test_a_ctrl_c_while_the_report_is_printed_says_the_verdicts_were_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33 item 3: verify writes its verdicts to build/.verified.json; a Ctrl-C after that (while the
    report is printed) says so, read back from disk, not "previous state kept"."""
    from typer.testing import CliRunner

    import toolkit.commands.verify as verify_cmd
    from toolkit.cli import app

    cfg, build = _project(tmp_path)
    vd = make_variant(build)
    assert not (build / ".verified.json").exists()

    def printing_cut_short(*_a: object, **_k: object) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr(verify_cmd, "_show", printing_cut_short)
    res = CliRunner().invoke(app, ["verify", "-C", str(cfg.root), "--no-smoke"])
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]
    assert last.startswith("interrupted: build/.verified.json holds this verify's verdicts"), res.output
    assert f"{vd.name} {'passed' if stamp_verdict(build, vd)[0] else 'failed'} (read back from disk)" in last
    assert (build / ".verified.json").is_file()
