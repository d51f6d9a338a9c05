"""build.toml editions against the real parsers of the installed kernels release (kernels' `Build.open`).

The packages render the edition that their oldest supported client (kernels-minver) reads; kernel-builder's Nix
builder gets an edition-6 copy. What each release does is in toolkit/core/build_edition.py; the tests that need a
particular release skip, saying which, under the others (run the suite under 0.17.2, 0.18.3 and 0.19.1)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from toolkit.build.inputs import _kernel_sections
from toolkit.build.nix import COPIED, NixPlan, _stage_project, render_flake, vendor_of
from toolkit.core import build_edition
from toolkit.core import config as config_mod
from toolkit.core.kernels_client import KERNELS_MINVER, kernels_type
from toolkit.render import stage as render

REPO = Path(__file__).resolve().parents[2]
KERNELS = importlib.metadata.version("kernels")
INSTALLED_READS = build_edition.edition_for(KERNELS)
# The notice kernels >= 0.18 prints (to stderr, from Rust) when it opens an edition-5 file.
UPGRADE_NOTICE = "the Nix builder requires edition 6"

needs_edition_6_client = pytest.mark.skipif(
    INSTALLED_READS < 6, reason=f"kernels {KERNELS} is installed; edition 6 needs kernels >= 0.18.3"
)
needs_0_17 = pytest.mark.skipif(
    not KERNELS.startswith("0.17."), reason=f"kernels {KERNELS} is installed; this documents kernels 0.17.x"
)


def _configs() -> list[config_mod.Config]:
    return list(config_mod.load(REPO).selected())


def _data(text: str) -> dict[str, Any]:
    """build.toml's keys and values (comments and layout dropped)."""
    return tomlkit.parse(text).unwrap()


def _build_toml(config: config_mod.Config, edition: int) -> str:
    files = render.plan(config, edition=edition).by_path()
    return files["build.toml"].content


def _open(tmp_path: Path, text: str, capfd: pytest.CaptureFixture[str]) -> str:
    """Build.open `text` as a kernel's build.toml; return what the parser wrote to stderr."""
    kernel_dir = tmp_path / f"k{len(list(tmp_path.iterdir()))}"
    kernel_dir.mkdir()
    (kernel_dir / "build.toml").write_text(text)
    capfd.readouterr()
    kernels_type("Build").open(str(kernel_dir))
    return capfd.readouterr().err


PACKAGES = [c.package.name for c in _configs()]


def test_the_edition_follows_the_minimum_client() -> None:
    # The rendered edition is data: the newest that kernels-minver reads. Raising the minimum client to a
    # release that reads edition 6 switches the edition.
    assert build_edition.BUILD_EDITION == build_edition.edition_for(KERNELS_MINVER)
    assert [build_edition.edition_for(v) for v in ("0.17.2", "0.18.3", "0.19.1", "0.19.1.dev0")] == [5, 6, 6, 6]
    with pytest.raises(ValueError, match="older than every client"):
        build_edition.edition_for("0.16.2")


@pytest.mark.parametrize("package", PACKAGES)
def test_rendered_build_toml_declares_the_edition_of_the_minimum_client(package: str) -> None:
    config = config_mod.load(REPO).for_package(package)
    doc = _data(_build_toml(config, build_edition.BUILD_EDITION))
    assert doc["general"]["edition"] == build_edition.BUILD_EDITION
    key = "language" if build_edition.BUILD_EDITION >= 6 else "backend"
    assert all(key in table for table in doc["kernel"].values()), doc["kernel"]


@pytest.mark.parametrize("package", PACKAGES)
def test_rendered_build_toml_opens_with_the_installed_client(
    package: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config = config_mod.load(REPO).for_package(package)
    err = _open(tmp_path, _build_toml(config, build_edition.BUILD_EDITION), capfd)
    if build_edition.BUILD_EDITION >= INSTALLED_READS:
        assert UPGRADE_NOTICE not in err, err
    else:  # an older edition than the client's: it upgrades in memory and says the Nix builder needs more
        assert UPGRADE_NOTICE in err and f"edition {build_edition.BUILD_EDITION} format" in err, err


@needs_edition_6_client
@pytest.mark.parametrize("package", PACKAGES)
def test_edition_6_render_opens_without_the_upgrade_notice(
    package: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    text = _build_toml(config_mod.load(REPO).for_package(package), 6)
    assert "\nedition = 6\n" in text and '\nbackend = "' not in text
    err = _open(tmp_path, text, capfd)
    assert "edition" not in err, err


@needs_edition_6_client
def test_edition_6_parser_rejects_an_edition_5_kernel_key(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # Proof that the edition-6 render is read as edition 6 (not silently as 5): a kernel named by `backend`,
    # edition 5's key, is refused.
    text = _build_toml(_configs()[0], 6).replace('language = "cpp-cuda"', 'backend = "cuda"', 1)
    with pytest.raises(ValueError, match="Missing field language"):
        _open(tmp_path, text, capfd)


@needs_0_17
@pytest.mark.parametrize("package", PACKAGES)
def test_kernels_0_17_refuses_edition_6(package: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # Why the packages (kernels-minver 0.17.2) render edition 5: 0.17's parser does not read edition 6.
    text = _build_toml(config_mod.load(REPO).for_package(package), 6)
    with pytest.raises(ValueError, match="unsupported build edition 6; upgrade kernel-builder"):
        _open(tmp_path, text, capfd)
    assert build_edition.BUILD_EDITION == 5


@pytest.mark.parametrize("package", PACKAGES)
def test_upgrading_the_rendered_file_equals_rendering_edition_6(package: str) -> None:
    # The Nix stage's rewrite and the templates agree key for key (comments aside), in both directions.
    config = config_mod.load(REPO).for_package(package)
    committed = _build_toml(config, build_edition.BUILD_EDITION)
    rendered_5, rendered_6 = _build_toml(config, 5), _build_toml(config, 6)
    assert _data(build_edition.to_edition(rendered_5, 6)) == _data(rendered_6)
    assert _data(build_edition.to_edition(committed, build_edition.NIX_EDITION)) == _data(rendered_6)
    assert build_edition.to_edition(rendered_5, 5) == rendered_5
    assert _data(rendered_6) != _data(rendered_5)


@pytest.mark.parametrize("package", PACKAGES)
def test_the_build_reads_the_backend_of_either_edition(package: str) -> None:
    config = config_mod.load(REPO).for_package(package)
    sections = {e: _kernel_sections(_data(_build_toml(config, e))) for e in (5, 6)}
    assert sections[5] == sections[6]
    assert {s.backend for s in sections[6]} == set(config.backends)


def test_nix_stage_gets_edition_6(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    import shutil

    from toolkit import render

    project = tmp_path / "project"  # a copy of this repository's configuration, rendered into its build/
    project.mkdir()
    for name in ("pyproject.toml", "templates", "variants", "vendor"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, project / name)
    config = config_mod.load(project).selected()[0]
    render.execute(render.plan(config))
    stage = tmp_path / "stage"
    stage.mkdir()
    plan = NixPlan(render_flake(config.name), ("nix",), COPIED, vendor_of(config.package_root))
    _stage_project(config.package_root, stage, plan)
    staged = (stage / "build.toml").read_text()
    # vendor/ is staged beside build.toml, so its paths lose the way up from build/<name>/src
    assert _data(staged) == _data(
        _build_toml(config, build_edition.NIX_EDITION).replace('"../../../vendor/', '"vendor/')
    )
    if INSTALLED_READS >= build_edition.NIX_EDITION:  # kernel-builder's parser reads it as it stands
        (tmp_path / "open").mkdir()
        assert "edition" not in _open(tmp_path / "open", staged, capfd)


def test_to_edition_refuses_an_edition_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="edition 7"):
        build_edition.to_edition("[general]\nedition = 5\n", 7)
