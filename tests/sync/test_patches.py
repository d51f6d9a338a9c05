"""Patches applied on the pristine extraction: applied / already upstream / conflict (naming the hunk)."""

from __future__ import annotations

import pytest

from tests.helpers.fixture_repos import make_patch
from toolkit.core.errors import PatchError
from toolkit.sync.patches import apply_patches, patch_targets

ORIG = "".join(f"line {i}\n" for i in range(1, 41))
FILES = {"src/a.cu": ORIG.encode(), "src/b.h": b"one\ntwo\nthree\n"}


def edit(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


def test_applied_in_name_order_and_chained() -> None:
    p1 = make_patch("src/a.cu", ORIG, edit(ORIG, "line 5\n", "line five\n"))
    mid = edit(ORIG, "line 5\n", "line five\n")
    p2 = make_patch("src/a.cu", mid, edit(mid, "line five\n", "line FIVE\n"))  # only applies after p1
    out, res = apply_patches(FILES, [("0001-a.patch", p1.encode()), ("0002-b.patch", p2.encode())])
    assert [r.verdict for r in res] == ["applied", "applied"]
    assert b"line FIVE\n" in out["src/a.cu"] and out["src/b.h"] == FILES["src/b.h"]
    assert res[0].files == ("src/a.cu",)


def test_already_upstream_is_detected_and_not_applied() -> None:
    upstream_has_it = edit(ORIG, "line 7\n", "line seven\n")
    p = make_patch("src/a.cu", ORIG, upstream_has_it)
    out, res = apply_patches({"src/a.cu": upstream_has_it.encode()}, [("0001-x.patch", p.encode())])
    assert res[0].verdict == "already-upstream"
    assert out["src/a.cu"] == upstream_has_it.encode()


def test_conflict_names_the_hunk() -> None:
    target = edit(edit(ORIG, "line 3\n", "line three\n"), "line 30\n", "line thirty\n")
    p = make_patch("src/a.cu", ORIG, target)  # two hunks: @@ -1.. and @@ -27..
    moved = edit(ORIG, "line 29\n", "line 29 changed upstream\n")  # breaks only the second hunk
    with pytest.raises(PatchError) as exc:
        apply_patches({"src/a.cu": moved.encode()}, [("0003-conflict.patch", p.encode())])
    msg = exc.value.one_line()
    assert "0003-conflict.patch" in msg and "hunk #2" in msg and "src/a.cu" in msg and "\n" not in msg


def test_patch_of_unvendored_file_is_refused() -> None:
    p = make_patch("src/other.cu", "x\n", "y\n")
    with pytest.raises(PatchError, match="not vendored"):
        apply_patches(FILES, [("0001.patch", p.encode())])


def test_paths_relative_to_project_root_are_recognised() -> None:
    p = make_patch("src/b.h", "one\ntwo\nthree\n", "one\n2\nthree\n", prefix="vendor/ggml/")
    level, targets = patch_targets(p)
    assert level == 3 and targets == [("src/b.h", "src/b.h")]
    out, res = apply_patches(FILES, [("0001.patch", p.encode())])
    assert res[0].verdict == "applied" and out["src/b.h"] == b"one\n2\nthree\n"


def test_new_file_from_a_patch() -> None:
    p = "--- /dev/null\n+++ b/src/new.h\n@@ -0,0 +1 @@\n+#pragma once\n"
    out, res = apply_patches(FILES, [("0001-new.patch", p.encode())])
    assert out["src/new.h"] == b"#pragma once\n" and res[0].verdict == "applied"


def test_not_a_diff_is_refused() -> None:
    with pytest.raises(PatchError, match="holds no unified diff"):
        apply_patches(FILES, [("0001.patch", b"hello\n")])


def test_no_patches_is_identity() -> None:
    out, res = apply_patches(FILES, [])
    assert out == FILES and res == []


@pytest.mark.parametrize("path", ["../../etc/evil.h", "/etc/evil.h", "src/../../evil.h"])
def test_patch_writing_outside_vendor_is_refused(path: str) -> None:
    p = f"--- /dev/null\n+++ {path}\n@@ -0,0 +1 @@\n+x\n"
    with pytest.raises(PatchError, match="outside vendor/ggml"):
        apply_patches(FILES, [("0001-evil.patch", p.encode())])
