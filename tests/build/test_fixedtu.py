"""toolkit/build/fixedtu.py: nvcc compiles every CUDA source through a stand-in at a fixed path (issue 33 item
7), the same for a tree wherever it lies; the real build comparison is tests/build/test_reproducible.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from toolkit.build import fixedtu
from toolkit.core.errors import BuildError

ARGV = ["nvcc", "-c", "csrc/cuda/gdn.cu", "-o", "{out}", "-O3"]


@pytest.fixture
def tmpdir_root(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    return tmp_path / "tmp"


def test_two_project_directories_compile_from_one_path(tmp_path, tmpdir_root):
    one, two = tmp_path / "a" / "proj", tmp_path / "elsewhere" / "proj2"
    a, b = fixedtu.through_stand_in(list(ARGV), one), fixedtu.through_stand_in(list(ARGV), two)
    assert a[2] == b[2] and a[:2] == ["nvcc", "-c"] and a[3:-1] == ARGV[3:]
    stand_in = Path(a[2])
    assert stand_in.parent.parent.parent == fixedtu.stand_in_root() and stand_in.parts[-3:] == (
        "csrc",
        "cuda",
        "gdn.cu",
    )
    assert stand_in.read_bytes() == b"#include GGML_VENDOR_TU\n"
    assert a[-1] == f'-DGGML_VENDOR_TU="{one / "csrc/cuda/gdn.cu"}"' and b[-1].endswith(f'{two / "csrc/cuda/gdn.cu"}"')
    other = fixedtu.through_stand_in(["nvcc", "-c", "csrc/other/gdn.cu"], one)
    assert other[2] != a[2]  # one path per source: anonymous namespaces stay unique per translation unit


@pytest.mark.parametrize("src", ["/elsewhere/k.cu", "../k.cu", 'csrc/we"ird.cu'])
def test_a_source_that_cannot_be_named_so_is_compiled_as_given(tmp_path, tmpdir_root, src):
    argv = ["nvcc", "-c", src, "-o", "x.o"]
    assert fixedtu.through_stand_in(list(argv), tmp_path / "proj") == argv


def test_a_stand_in_directory_others_can_write_is_refused(tmp_path, tmpdir_root):
    root = fixedtu.stand_in_root()
    root.mkdir(parents=True)
    root.chmod(0o777)
    with pytest.raises(BuildError, match="not a private directory"):
        fixedtu.through_stand_in(list(ARGV), tmp_path / "proj")
