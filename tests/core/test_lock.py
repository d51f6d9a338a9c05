"""vendor/UPSTREAM: stable rendering, round trip, read_lock, malformed locks, license inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fixture_repos import locked
from toolkit.core.errors import VendorStateError
from toolkit.core.lock import LicenseInfo, Lock, LockedFile, LockedPatch, parse_lock, read_lock, render_lock
from toolkit.sync.licenses import license_inventory


def sample(**over: Any) -> Lock:
    files = (
        LockedFile("src/b.h", "b" * 64, "1" * 40, "included by src/a.cu:3", ("op/cuda",)),
        LockedFile("LICENSE", "c" * 64, "2" * 40, "always ships (license notice)"),
        LockedFile("src/a.cu", "a" * 64, "3" * 40, "entry of op/cuda", ("op/cuda",), ("0001-fix.patch",)),
    )
    base: dict[str, Any] = dict(
        upstream="https://example.invalid/ggml",
        layout="ggml",
        commit="f" * 40,
        rev="v1",
        date="2026-01-01T12:00:00+00:00",
        subject='say "hi" \\ ünïcode',
        tool_version="0.1.0",
        files={f.path: f.sha256 for f in files},
        file_info=files,
        patches=(
            LockedPatch("0001-fix.patch", "d" * 64, "applied"),
            LockedPatch("0002-old.patch", "e" * 64, "already-upstream"),
        ),
        licenses=(LicenseInfo("LICENSE", ("MIT",), ("Copyright (c) 2024 X",)),),
        entries={"op": {"cuda": ("src/a.cu",)}},
        closures={"op": {"cuda": ("src/a.cu", "src/b.h")}},
        fingerprints={"sig": "9" * 64},
        llama_cpp_commit="a" * 40,
    )
    base.update(over)
    return Lock(**base)


def test_round_trip_and_stable_bytes() -> None:
    lock = sample()
    text = render_lock(lock)
    back = parse_lock(text)
    assert render_lock(back) == text
    assert back.files == {"src/b.h": "b" * 64, "LICENSE": "c" * 64, "src/a.cu": "a" * 64}
    assert back.commit == "f" * 40 and back.layout == "ggml" and back.tool_version == "0.1.0"
    assert back.subject == 'say "hi" \\ ünïcode'
    info = back.info("src/a.cu")
    assert info is not None and info.patched_by == ("0001-fix.patch",)
    assert [p.verdict for p in back.patches] == ["applied", "already-upstream"]
    assert back.closure("op", "cuda") == ("src/a.cu", "src/b.h")
    assert back.llama_cpp_commit == "a" * 40


def test_files_sorted_whatever_the_input_order() -> None:
    a = sample()
    b = sample(file_info=tuple(reversed(a.file_info)))
    assert render_lock(a) == render_lock(b)
    text = render_lock(a)
    assert text.index('[files."LICENSE"]') < text.index('[files."src/a.cu"]') < text.index('[files."src/b.h"]')


def test_lock_is_readable_toml_with_reasons() -> None:
    text = render_lock(sample())
    assert 'reason = "included by src/a.cu:3"' in text
    assert "[upstream]" in text and 'url = "https://example.invalid/ggml"' in text
    assert not any(len(line) > 160 for line in text.splitlines())


def test_read_lock_none_without_file(tmp_path: Path) -> None:
    assert read_lock(tmp_path) is None
    (tmp_path / "UPSTREAM").write_text(render_lock(sample()))
    assert locked(tmp_path).commit == "f" * 40


@pytest.mark.parametrize("text", ["not toml [[[", "[upstream]\nurl = 'x'\n", "schema = 1\n"])
def test_malformed_lock_is_one_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "UPSTREAM").write_text(text)
    with pytest.raises(VendorStateError) as exc:
        read_lock(tmp_path)
    assert "is not a valid lock" in exc.value.one_line() and "\n" not in exc.value.one_line()


def test_license_inventory() -> None:
    inv = license_inventory(
        {
            "LICENSE": b"MIT License\n\nCopyright (c) 2024-2026 The fixture authors\n\nPermission is hereby granted, free of "
            b"charge, to any person obtaining a copy\nThe above copyright notice and this permission notice\n",
            "src/x.metal": b"// MIT licensed. Copyright (c) 2023 Jeffrey Quesnelle and Bowen Peng.\n",
            "src/y.h": b"/* SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception */\n",
            "src/plain.h": b"int x;\n",
        }
    )
    by = {i.path: i for i in inv}
    assert set(by) == {"LICENSE", "src/x.metal", "src/y.h"}
    assert by["LICENSE"].spdx == ("MIT",)
    assert by["LICENSE"].copyright == ("Copyright (c) 2024-2026 The fixture authors",)
    assert by["src/x.metal"].spdx == ("MIT",)
    assert by["src/x.metal"].copyright == ("MIT licensed. Copyright (c) 2023 Jeffrey Quesnelle and Bowen Peng.",)
    assert by["src/y.h"].spdx == ("Apache-2.0 WITH LLVM-exception",)


def test_notices_stay_in_the_vendored_file_and_are_read_back_only_from_the_pinned_bytes(tmp_path: Path) -> None:
    from toolkit.core.hashing import sha256_bytes

    license_bytes = b"MIT License\n\nCopyright (c) 2024 The fixture authors\n"
    (inv,) = license_inventory({"LICENSE": license_bytes})
    assert inv.copyright_at == (3,)
    files = (LockedFile("LICENSE", sha256_bytes(license_bytes), "2" * 40, "always ships (license notice)"),)
    lock = sample(file_info=files, files={"LICENSE": sha256_bytes(license_bytes)}, licenses=(inv,))
    text = render_lock(lock)
    assert "The fixture authors" not in text and "copyright-lines = [3]" in text
    (tmp_path / "UPSTREAM").write_text(text)
    (tmp_path / "ggml").mkdir()
    assert locked(tmp_path).licenses[0].copyright == ()  # file not vendored: nothing to read back
    (tmp_path / "ggml" / "LICENSE").write_bytes(license_bytes)
    assert locked(tmp_path).licenses[0].copyright == ("Copyright (c) 2024 The fixture authors",)
    (tmp_path / "ggml" / "LICENSE").write_bytes(license_bytes.replace(b"2024", b"1999"))
    assert locked(tmp_path).licenses[0].copyright == ()  # edited bytes are not the pinned notice
