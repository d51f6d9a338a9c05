"""The project's [tool.ggml-vendor] table loads, validates, and is edited without losing comments."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from toolkit.core import config
from toolkit.core.errors import ConfigError


def _copy_pyproject(repo_root: Path, tmp_path: Path) -> Path:
    shutil.copy(repo_root / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(repo_root / "templates", tmp_path / "templates")
    return tmp_path


def test_repository_config_loads(repo_root: Path) -> None:
    cfg = config.load(repo_root)
    assert cfg.name == "ggml-attn-kernels"
    assert cfg.module == "ggml_attn_kernels"
    assert {op.name for op in cfg.ops} == {"gated_delta_net", "flash_attn", "ssm_conv"}
    conv = next(op for op in cfg.ops if op.name == "ssm_conv")
    assert conv.entries["cuda"][0].alternatives == ("src/ggml-cuda/ssm-conv.cu",)
    gdn = next(op for op in cfg.ops if op.name == "gated_delta_net")
    assert gdn.entries["cuda"][0].alternatives == ("src/ggml-cuda/gated_delta_net.cu",)
    assert len(gdn.entries["metal"][0].alternatives) == 2


def test_set_value_keeps_comments(repo_root: Path, tmp_path: Path) -> None:
    root = _copy_pyproject(repo_root, tmp_path)
    before = (root / "pyproject.toml").read_text()
    config.set_value(root, "version", 2, package="ggml-attn-kernels")
    config.set_value(root, "upstream", "https://github.com/ggml-org/llama.cpp")
    after = (root / "pyproject.toml").read_text()
    assert config.load(root).version == 2 and config.load(root).upstream.endswith("llama.cpp")
    assert "# major version -> Hub branch v1" in after
    assert before.count("\n") == after.count("\n")


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("[tool.ggml-vendor.packages.ggml-attn-kernels]\n", "[tool.ggml-vendor.packages.Bad_Name]\n", "not a valid"),
        ('backends = ["cuda", "metal", "rocm"]', 'backends = ["cuda", "vulkan"]', "unknown backend"),
        ('cuda = ["src/ggml-cuda/fattn-vec.cuh"]', 'cuda = ["../escape.cuh"]', "not a relative path"),
        ("version = 1 ", 'version = "one" ', "must be a int"),
        ("version = 1 ", "version = -3 ", "whole number from 1"),
    ],
)
def test_bad_config_is_one_clear_error(repo_root: Path, tmp_path: Path, old: str, new: str, match: str) -> None:
    root = _copy_pyproject(repo_root, tmp_path)
    text = (root / "pyproject.toml").read_text()
    assert old in text
    (root / "pyproject.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError, match=match):
        config.load(root)


def test_missing_table_names_the_remedy(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    with pytest.raises(ConfigError, match="--project"):
        config.load(tmp_path)


def test_every_package_has_the_same_shape(repo_root: Path) -> None:
    cfg = config.load(repo_root)
    for name in ("ggml-attn-kernels", "gguf-kernels"):
        view = cfg.for_package(name)
        pkg = view.package
        assert (pkg.templates, pkg.variants, pkg.source) == (
            f"templates/{name}",
            f"variants/{name}.toml",
            f"build/{name}/src",
        )
        assert view.build_dir == repo_root / "build" / name and view.package_root == view.build_dir / "src"
        assert pkg.key("op") == f"{name}:op"
        assert {k for k, _, _ in view.all_entries()} >= {pkg.key(op.name) for op in pkg.ops}


LEGACY = """[tool.ggml-vendor]
name = "old-kernels"   # the one-package shape
version = 3
license = "MIT"
hub-repo = "someone/old-kernels"
upstream = "embedded"
backends = ["cuda"]

[tool.ggml-vendor.ops.flash_attn]
cuda = ["src/ggml-cuda/fattn-vec.cuh"]
"""


def test_a_one_package_pyproject_migrates_with_one_line_of_notice(
    repo_root: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text(LEGACY)
    (tmp_path / "templates").mkdir()
    shutil.copy(repo_root / "templates" / "ggml-attn-kernels" / "facts.py", tmp_path / "templates" / "facts.py")
    cfg = config.load(tmp_path)
    pkg = cfg.package
    assert (pkg.name, pkg.version, pkg.hub_repo, pkg.templates, pkg.variants) == (
        "old-kernels",
        3,
        "someone/old-kernels",
        "templates",  # where the one-package shape keeps them, until moved to templates/old-kernels
        "variants/default.toml",
    )
    assert pkg.key("flash_attn") == "old-kernels:flash_attn" and cfg.build_dir == tmp_path / "build" / "old-kernels"
    config.load(tmp_path)  # the notice is said once
    err = capfd.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "[tool.ggml-vendor.packages.old-kernels]" in err, err
    assert (tmp_path / "pyproject.toml").read_text() == LEGACY  # read in memory, never rewritten
    (tmp_path / "templates" / "old-kernels").mkdir()
    (tmp_path / "templates" / "facts.py").rename(tmp_path / "templates" / "old-kernels" / "facts.py")
    assert config.load(tmp_path).package.templates == "templates/old-kernels"
