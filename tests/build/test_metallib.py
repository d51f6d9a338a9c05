"""toolkit/build/metallib.py: the metallib parser, the embedded-library finder, the compatibility check and the
fixture builder, tested against the byte layout documented in the module (offsets checked by hand here,
not through the parser) and end to end through a real shared object built with g++."""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.metallib_fixture import FixtureFunction, build_fixture
from toolkit.build import metal, metallib
from toolkit.build.metallib import MetallibError, check, find_embedded, parse
from toolkit.core import package_facts

# The first package's op facts (templates/facts.py), as render and verify see them.
FACTS = package_facts.load(Path(__file__).resolve().parents[2] / "templates" / "ggml-attn-kernels", "ggml-attn-kernels")

GDN = ("kernel_gated_delta_net_f32_1", "kernel_gated_delta_net_f32_2", "kernel_gated_delta_net_f32_4")


def test_fixture_layout_matches_the_documented_bytes() -> None:
    data = build_fixture(GDN, target_os_version=(26, 0), uuid=b"0123456789abcdef")
    assert data[:4] == b"MTLB"
    platform, major, minor, lib_type, os_code, os_major, os_minor = struct.unpack_from("<HHHBBHH", data, 4)
    assert (platform, major, minor, lib_type, os_code, os_major, os_minor) == (0x8001, 2, 9, 0, 0x81, 26, 0)
    assert struct.unpack_from("<Q", data, 16)[0] == len(data)
    fl_off, fl_size, pub_off, pub_size, priv_off, priv_size, bc_off, bc_size = struct.unpack_from("<8Q", data, 24)
    assert fl_off == 88 and struct.unpack_from("<I", data, 88)[0] == 3  # function count opens the list
    # MetalLibraryArchive's rule: offset + size lands on the last group's closing ENDT ...
    assert data[fl_off + fl_size : fl_off + fl_size + 4] == b"ENDT"
    # ... and the header extension starts right after it: UUID tag, then ENDT, then the public metadata.
    ext = fl_off + fl_size + 4
    assert data[ext : ext + 4] == b"UUID" and struct.unpack_from("<H", data, ext + 4)[0] == 16
    assert data[ext + 6 : ext + 22] == b"0123456789abcdef" and data[ext + 22 : ext + 26] == b"ENDT"
    assert pub_off == ext + 26 and priv_off == pub_off + pub_size and bc_off == priv_off + priv_size
    assert bc_off + bc_size == len(data)
    # first tag group: size (including itself), then NAME as a NUL-terminated string
    group = struct.unpack_from("<I", data, 92)[0]
    assert data[96:100] == b"NAME" and data[102 : 102 + 29] == b"kernel_gated_delta_net_f32_1\0"
    assert data[92 + group - 4 : 92 + group] == b"ENDT"


def test_parse_roundtrip() -> None:
    data = build_fixture([*GDN, FixtureFunction("helper", type="visible", language_version=(3, 1))])
    lib = parse(data)
    assert lib.function_names == (*GDN, "helper")
    assert [f.type for f in lib.functions] == ["kernel"] * 3 + ["visible"]
    assert lib.language_version == (4, 0) and lib.air_version == (2, 8)
    assert lib.functions[3].language_version == (3, 1)
    assert lib.platform == "macOS" and lib.target_os == "macOS" and lib.min_os == (26, 0)
    assert lib.file_version == (2, 9) and lib.library_type == "executable"
    assert all(f.hash_ok for f in lib.functions)
    assert lib.header_extension == ("UUID",) and lib.uuid == b"ggml-vendor-fixt".hex()
    assert lib.sha256 == hashlib.sha256(data).hexdigest()
    assert lib.required_macos == (26, 0)
    assert lib.to_dict()["language_version"] == "4.0"


def test_parse_without_header_extension_or_target_os() -> None:
    lib = parse(build_fixture(["k"], uuid=None, target_os=None, language_version=(3, 2)))
    assert lib.header_extension == () and lib.uuid is None
    assert lib.target_os is None and lib.min_os is None
    assert lib.required_macos == (15, 0)  # from the language version alone


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b"XTLB" + b[4:], "no MTLB magic"),
        (lambda b: b[:60], "shorter than the 88-byte header"),
        (lambda b: b[:-1], "header says"),
        (lambda b: b + b"\0", "header says"),
        (lambda b: b[:92] + struct.pack("<I", 7) + b[96:], "tag group size 7 is too small"),
        (lambda b: b[:24] + struct.pack("<Q", 5000) + b[32:], "runs past the end"),
        (lambda b: b[:24] + struct.pack("<Q", 40) + b[32:], "lies inside the header"),
    ],
)
def test_parse_rejects_broken_containers(mutate: Callable[[bytes], bytes], message: str) -> None:
    data = build_fixture(GDN)
    with pytest.raises(MetallibError, match=message):
        parse(mutate(data))


def test_bitcode_hash_mismatch_is_found_and_reported() -> None:
    data = bytearray(build_fixture(GDN))
    lib = parse(bytes(data))
    f = lib.functions[1]
    data[f.bitcode_offset] ^= 0xFF  # corrupt the second kernel's bitcode
    bad = parse(bytes(data))
    assert [fn.hash_ok for fn in bad.functions] == [True, False, True]
    assert any("hash mismatch" in p and f.name in p for p in check(bad))


def test_check_language_version_against_declared_minimum_macos() -> None:
    metal4 = parse(build_fixture(GDN))
    assert check(metal4, required=GDN, min_macos="26.0") == []
    problems = check(metal4, required=GDN, min_macos="15.0")
    assert any("Metal language 4.0 needs macOS 26.0" in p for p in problems)
    assert any("built for macOS 26.0" in p for p in problems)
    metal32 = parse(build_fixture(GDN, language_version=(3, 2), air_version=(2, 7), target_os_version=(15, 0)))
    assert check(metal32, min_macos="15.0") == []
    assert any("needs macOS 15.0" in p for p in check(metal32, min_macos="14.0"))


def test_check_missing_kernels_and_wrong_platform() -> None:
    lib = parse(build_fixture(GDN[:2], platform=metallib.PLATFORM_IOS, target_os="iOS"))
    problems = check(lib, required=GDN)
    assert any("lacks 1 kernel" in p and GDN[2] in p for p in problems)
    assert any("targets iOS" in p for p in problems)
    assert any("built for iOS" in p for p in problems)


def test_find_embedded_skips_decoys_and_finds_every_library() -> None:
    a = build_fixture(GDN)
    b = build_fixture(["kernel_flash_attn_ext_vec_reduce"], language_version=(3, 1), target_os_version=(14, 0))
    # decoys: the magic in a string, a header whose size field points past the end, random bytes
    decoy = b"MTLB" + b"\0" * 12 + struct.pack("<Q", 10**9) + b"\x01" * 70
    blob = b"\x7fELF" + b"x" * 100 + b"...MTLB in a string..." + decoy + a + b"\0" * 13 + b + b"MTLB"
    found = find_embedded(blob)
    assert [lib.function_names for lib in found] == [GDN, ("kernel_flash_attn_ext_vec_reduce",)]
    assert found[0].offset == blob.index(a) and found[1].offset == blob.index(b)
    assert found[0].sha256 == hashlib.sha256(a).hexdigest()
    assert find_embedded(b"nothing here") == []


def test_parse_version() -> None:
    assert metallib.parse_version("26") == (26, 0)
    assert metallib.parse_version("15.4.1") == (15, 4)
    with pytest.raises(MetallibError):
        metallib.parse_version("tahoe")


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")
def test_embedded_header_survives_compilation_into_a_shared_object(tmp_path: Path) -> None:
    """The header toolkit/build/metal.py generates, compiled into a .so exactly as the extension would hold it,
    is found again by find_embedded with its bytes intact (the path verify takes on a real darwin build)."""
    data = build_fixture(metal.required_kernels(["gated_delta_net", "flash_attn"], FACTS))
    (tmp_path / "lib.metallib").write_bytes(data)
    metal.embed_metallib(tmp_path / "lib.metallib", tmp_path / "gen" / "x_metallib.h", "x_metal")
    src = tmp_path / "use.cpp"
    src.write_text(
        '#include "x_metallib.h"\n'
        'extern "C" const unsigned char * ggml_vendor_metallib(unsigned long * n) {\n'
        "  *n = x_metal::metallib_data_len; return x_metal::metallib_data; }\n"
    )
    so = tmp_path / "libx.so"
    subprocess.run(
        ["g++", "-std=c++17", "-O2", "-shared", "-fPIC", f"-I{tmp_path / 'gen'}", str(src), "-o", str(so)],
        check=True,
        capture_output=True,
    )
    found = find_embedded(so.read_bytes(), where=so.name)
    assert len(found) == 1
    assert found[0].sha256 == hashlib.sha256(data).hexdigest()
    assert (
        check(found[0], required=metal.required_kernels(["gated_delta_net", "flash_attn"], FACTS), min_macos="26.0")
        == []
    )
