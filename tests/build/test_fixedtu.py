"""toolkit/build/fixedtu.py: nvcc compiles every CUDA source through a stand-in at a fixed path (issue 33 item
7), the same for a tree wherever it lies; the real build comparison is tests/build/test_reproducible.py."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers.machine import nvcc_available
from toolkit.build import fixedtu
from toolkit.core.errors import BuildError

ARGV = ["nvcc", "-c", "csrc/cuda/gdn.cu", "-o", "{out}", "-O3"]


@pytest.fixture
def tmpdir_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-ins go under this test's tmp dir, not the machine's /tmp."""
    monkeypatch.setattr(fixedtu, "FIXED_BASE", tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    return tmp_path / "tmp"


def test_two_project_directories_compile_from_one_path(tmp_path: Path, tmpdir_root: Path) -> None:
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
def test_a_source_that_cannot_be_named_so_is_compiled_as_given(tmp_path: Path, tmpdir_root: Path, src: str) -> None:
    argv = ["nvcc", "-c", src, "-o", "x.o"]
    assert fixedtu.through_stand_in(list(argv), tmp_path / "proj") == argv


def test_a_stand_in_directory_others_can_write_is_refused(tmp_path: Path, tmpdir_root: Path) -> None:
    root = fixedtu.stand_in_root()
    root.mkdir(parents=True)
    root.chmod(0o777)
    with pytest.raises(BuildError, match="not a private directory"):
        fixedtu.through_stand_in(list(ARGV), tmp_path / "proj")


def test_the_fixed_path_is_the_same_whatever_tmpdir_says(
    tmp_path: Path, tmpdir_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TMPDIR set per job or per session must not rename the translation units (nor miss the cache)."""
    roots, tags = set(), set()
    for name in ("job-1", "job-22"):
        (tmp_path / name).mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp_path / name))
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        assert tempfile.gettempdir() == str(tmp_path / name)
        roots.add(fixedtu.stand_in_root())
        tags.add(fixedtu.key_tag())
        assert fixedtu.through_stand_in(list(ARGV), tmp_path / "proj")[2].startswith(str(tmpdir_root))
    assert roots == {tmpdir_root / f"ggml-vendor-{os.getuid()}" / "tu"} and len(tags) == 1


def test_without_a_usable_fixed_base_the_temp_dir_is_used_and_the_cache_key_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fixedtu, "FIXED_BASE", tmp_path / "no-such-dir")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "fallback"))
    fallback = fixedtu.stand_in_root()
    assert fallback == tmp_path / "fallback" / f"ggml-vendor-{os.getuid()}" / "tu"
    tag = fixedtu.key_tag()
    monkeypatch.setattr(fixedtu, "FIXED_BASE", tmp_path)
    # Another fixed path gives other anonymous-namespace names: its objects are other cache entries.
    assert fixedtu.key_tag() != tag and str(fallback) in tag


# Two projects' sources at one project-relative path, different in content: what concurrent builds of two
# projects compile through one stand-in.
_SOURCE = """namespace {
__global__ void fill(float * p) { p[0] = 1.0f; }
}
extern "C" int which_%s(float * p) { fill<<<1, 1>>>(p); return 0; }
"""


def _anonymous_names(obj: bytes) -> set[bytes]:
    return set(re.findall(rb"_GLOBAL__N__[0-9a-f]+", obj))


@pytest.mark.slow
@pytest.mark.skipif(not nvcc_available()[0], reason=nvcc_available()[1])
def test_two_projects_compiled_at_once_through_one_stand_in_each_get_their_own_source(
    tmp_path: Path, tmpdir_root: Path
) -> None:
    roots = {name: tmp_path / name / "proj" for name in ("a", "bb-elsewhere")}
    for name, root in roots.items():
        (root / "csrc").mkdir(parents=True)
        (root / "csrc" / "k.cu").write_text(_SOURCE % name.split("-")[0])
    plain = ["nvcc", "-c", "csrc/k.cu", "-arch=sm_80", "-o"]

    def compile_all(stand_in: bool) -> dict[str, bytes]:
        procs = {}
        for name, root in roots.items():
            argv = [*plain, str(tmp_path / f"{name}-{stand_in}.o")]
            argv = fixedtu.through_stand_in(argv, root) if stand_in else argv
            procs[name] = subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for proc in procs.values():
            out, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, out.decode(errors="replace")
        return {name: (tmp_path / f"{name}-{stand_in}.o").read_bytes() for name in roots}

    as_given = compile_all(False)
    # What the stand-in is for: compiled where they lie, the two name their anonymous namespaces apart.
    assert _anonymous_names(as_given["a"]) and _anonymous_names(as_given["a"]) != _anonymous_names(
        as_given["bb-elsewhere"]
    ), "nvcc no longer names anonymous namespaces after the source's path"
    objs = compile_all(True)
    assert _anonymous_names(objs["a"]) == _anonymous_names(objs["bb-elsewhere"]) != set()
    assert b"which_a" in objs["a"] and b"which_bb" not in objs["a"]
    assert b"which_bb" in objs["bb-elsewhere"] and b"which_a" not in objs["bb-elsewhere"]
