"""The project's [tool.ggml-vendor] table loads, validates, and is edited without losing comments."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from toolkit.core import config
from toolkit.core.errors import ConfigError


def _copy_pyproject(repo_root: Path, tmp_path: Path) -> Path:
    shutil.copy(repo_root / "pyproject.toml", tmp_path / "pyproject.toml")
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
    config.set_value(root, "version", 2)
    after = (root / "pyproject.toml").read_text()
    assert config.load(root).version == 2
    assert "# major version -> Hub branch v1" in after
    assert before.count("\n") == after.count("\n")


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ('name = "ggml-attn-kernels"', 'name = "Bad_Name"', "not a valid kernel name"),
        ('backends = ["cuda", "metal", "rocm"]', 'backends = ["cuda", "vulkan"]', "unknown backend"),
        ('cuda = ["src/ggml-cuda/fattn-vec.cuh"]', 'cuda = ["../escape.cuh"]', "not a relative path"),
        ("version = 1 ", 'version = "one" ', "must be a int"),
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
