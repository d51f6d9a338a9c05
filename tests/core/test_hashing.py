"""The one tree hash (toolkit.core.hashing): verify's verdicts, the build's source identity and the embedded
miniature's cache key are all computed with it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from toolkit.core import hashing


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_the_tree_hash_is_paths_and_contents_in_order(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t", {"a.py": b"a", "sub/b.so": b"bb"})
    want = hashlib.sha256(
        b"a.py\0" + hashlib.sha256(b"a").hexdigest().encode() + b"\n"
        b"sub/b.so\0" + hashlib.sha256(b"bb").hexdigest().encode() + b"\n"
    ).hexdigest()
    assert hashing.tree_sha256(tree) == want
    _tree(tree, {"__pycache__/a.cpython-311.pyc": b"bytecode", "sub/c.pyc": b"x"})
    assert hashing.tree_sha256(tree) == want  # bytecode is left out
    (tree / "sub" / "b.so").rename(tree / "sub" / "b2.so")
    assert hashing.tree_sha256(tree) != want  # a rename changes it
    (tree / "sub" / "b2.so").rename(tree / "sub" / "b.so")
    (tree / "a.py").write_bytes(b"A")
    assert hashing.tree_sha256(tree) != want  # and so does a change of bytes


def test_verify_build_and_the_miniature_use_the_one_tree_hash(tmp_path: Path) -> None:
    from toolkit import verify
    from toolkit.build.inputs import source_identity
    from toolkit.sync import embedded

    assert verify.tree_sha256 is hashing.tree_sha256
    tree = _tree(tmp_path / "t", {"x.cu": b"x", "y.h": b"y"})
    assert source_identity(tree, ["x.cu", "y.h"]) == hashing.tree_sha256(tree)
    files = {"x.cu": b"x", "y.h": b"y"}
    assert embedded._content_key(files) == hashing.tree_sha256(tree)[:16]
