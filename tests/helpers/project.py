"""Edits of a copied project's pyproject.toml that tests make before running a stage on it."""

from __future__ import annotations

from pathlib import Path


def set_backends(root: Path, backends: list[str]) -> None:
    """Set the project's shared backends and narrow every declared package's own list to them (a package may only
    narrow the shared list: gguf-kernels declares cuda + metal)."""
    import tomlkit

    path = root / "pyproject.toml"
    doc = tomlkit.parse(path.read_text())
    table = doc["tool"]["ggml-vendor"]
    table["backends"] = backends
    for package in table.get("packages", {}).values():
        if "backends" in package:
            package["backends"] = [b for b in package["backends"] if b in backends]
    path.write_text(tomlkit.dumps(doc))


def first_package_pyproject(text: str) -> str:
    """pyproject.toml text with only the package declared first (ggml-attn-kernels) left: for tests that build a
    one-package project (or add their own packages) from this repository's configuration."""
    import tomlkit

    doc = tomlkit.parse(text)
    packages = doc["tool"]["ggml-vendor"]["packages"]
    for name in list(packages)[1:]:
        del packages[name]
    return tomlkit.dumps(doc)


# Two later packages for the demo on a family: one the embedded miniature serves (its entry file is there), one
# it cannot.
DEMO_LATER = """
[tool.ggml-vendor.packages.mini-quant]
version = 1
hub-repo = "someone/mini-quant"
backends = ["cuda"]

[tool.ggml-vendor.packages.mini-quant.ops.quant]
cuda = ["src/ggml-cuda/convert.cuh"]

[tool.ggml-vendor.packages.absent-quant]
version = 1
hub-repo = "someone/absent-quant"
backends = ["cuda"]

[tool.ggml-vendor.packages.absent-quant.ops.quant]
cuda = ["src/ggml-cuda/not-in-the-miniature.cu"]
"""


def demo_family_source(tmp_path: Path, repo_root: Path) -> Path:
    """tmp_path/src holding a pyproject.toml (this repository's first package plus DEMO_LATER) and each package's
    facts.py: the first package's templates are only a build.toml that fails to render; the others' none."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text(
        first_package_pyproject((repo_root / "pyproject.toml").read_text()) + DEMO_LATER
    )
    facts = repo_root / "templates" / "ggml-attn-kernels" / "facts.py"
    for name in ("ggml-attn-kernels", "mini-quant", "absent-quant"):
        (src / "templates" / name).mkdir(parents=True)
        (src / "templates" / name / "facts.py").write_text(facts.read_text() if name == "ggml-attn-kernels" else "")
    (src / "templates" / "ggml-attn-kernels" / "build.toml.j2").write_text("# {{ notice }}\n{{ no_such_name }}\n")
    return src
