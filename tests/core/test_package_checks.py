"""Hostile configurations: paths that leave the project or meet another package's, names and repo ids that are not
what they must be. Each is one error line, exit 2, and nothing written (render, which would write, is the probe)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.fixture_repos import tree_state
from toolkit.cli import app
from toolkit.core import config

runner = CliRunner()
FIRST = "[tool.ggml-vendor.packages.ggml-attn-kernels]\n"
SECOND = "[tool.ggml-vendor.packages.gguf-kernels]\n"


@pytest.fixture
def project(repo_root: Path, tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    for name in ("pyproject.toml", "templates", "variants"):
        src = repo_root / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    (root / "vendor" / "patches").mkdir(parents=True)
    return root


def _edit(root: Path, old: str, new: str) -> None:
    text = (root / "pyproject.toml").read_text()
    assert old in text, old
    (root / "pyproject.toml").write_text(text.replace(old, new, 1))


def _refused(root: Path, match: str) -> None:
    before = tree_state(root)
    res = runner.invoke(app, ["render", "-C", str(root)])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) <= 3 and match in " ".join(lines), res.output  # one error (wrapped by the terminal)
    assert tree_state(root) == before  # nothing written
    assert not list(root.glob("build/*/src"))  # no package was rendered


def test_the_project_as_copied_renders(project: Path) -> None:
    """The probe itself: the unedited copy renders every package into build/<name>/src/."""
    res = runner.invoke(app, ["render", "-C", str(project)])
    assert res.exit_code == 0, res.output
    for name in ("ggml-attn-kernels", "gguf-kernels"):
        src = project / "build" / name / "src"
        assert (src / "build.toml").is_file() and (src / "torch-ext" / "registration.h").is_file()


@pytest.mark.parametrize(
    ("templates_a", "templates_b"),
    [("./templates/shared", "templates/shared/."), ("templates/shared", "templates/shared/inner")],
)
def test_two_packages_meeting_in_one_templates_directory_are_refused(
    project: Path, templates_a: str, templates_b: str
) -> None:
    (project / "templates" / "shared" / "inner").mkdir(parents=True)
    for d in ("shared", "shared/inner"):
        (project / "templates" / d / "facts.py").write_text("OPS = None\n")
    _edit(project, FIRST, f'{FIRST}templates = "{templates_a}"\n')
    _edit(project, SECOND, f'{SECOND}templates = "{templates_b}"\n')
    _refused(project, "overlaps package 'ggml-attn-kernels''s templates")


def test_two_packages_sharing_a_matrix_are_refused(project: Path) -> None:
    _edit(project, SECOND, f'{SECOND}variants = "./variants/ggml-attn-kernels.toml"\n')
    _refused(project, "overlaps package 'ggml-attn-kernels''s variants")


@pytest.mark.parametrize("inside", ["vendor/templates", ".git/templates", "build/templates"])
def test_templates_inside_what_the_tool_owns_are_refused(project: Path, inside: str) -> None:
    (project / inside).mkdir(parents=True)
    _edit(project, SECOND, f'{SECOND}templates = "{inside}"\n')
    _refused(project, "which the tool owns")


def test_a_symbolic_link_out_of_the_project_is_refused(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    shutil.copytree(project / "templates" / "gguf-kernels", outside)
    shutil.rmtree(project / "templates" / "gguf-kernels")
    (project / "templates" / "gguf-kernels").symlink_to(outside)
    _refused(project, "outside the project")


def test_an_empty_templates_directory_is_refused_and_the_rendered_tree_kept(project: Path) -> None:
    assert runner.invoke(app, ["render", "-C", str(project)]).exit_code == 0
    rendered = tree_state(project / "build")
    shutil.rmtree(project / "templates" / "gguf-kernels")
    (project / "templates" / "gguf-kernels").mkdir()
    res = runner.invoke(app, ["render", "-C", str(project)])
    assert res.exit_code == 2 and "templates directory templates/gguf-kernels is empty" in res.output, res.output
    assert tree_state(project / "build") == rendered  # never deletes a generated tree


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("version = 1 ", "version = -3 ", "'version' must be a whole number from 1"),
        (SECOND, f'{SECOND}module = "class"\n', "is a Python keyword"),
        (SECOND, f'{SECOND}module = "os"\n', "is a standard-library module name"),
        (SECOND, f'{SECOND}module = "ggüf_kernels"\n', "is not an ASCII Python identifier"),
        ('hub-repo = "marcsun13/gguf-kernels"', 'hub-repo = "marcsun13/gguf kernels!"', "is not a Hub repo id"),
        ('hub-repo = "marcsun13/gguf-kernels"', 'hub-repo = "gguf-kernels"', "is not a Hub repo id"),
        ('hub-repo = "marcsun13/gguf-kernels"', 'hub-repo = "MarcSun13/GGML-Attn-Kernels"', "share the Hub repo"),
        (SECOND, SECOND.replace("gguf-kernels", "g" * 300), "not a valid kernel name"),
    ],
)
def test_bad_package_values_are_config_errors(project: Path, old: str, new: str, match: str) -> None:
    if SECOND in old and "g" * 300 in new:
        text = (project / "pyproject.toml").read_text().replace("packages.gguf-kernels", "packages." + "g" * 300)
        (project / "pyproject.toml").write_text(text)
    else:
        _edit(project, old, new)
    _refused(project, match)


def test_a_missing_facts_file_is_a_config_error_naming_the_package(project: Path) -> None:
    (project / "templates" / "gguf-kernels" / "facts.py").unlink()
    _refused(project, "package 'gguf-kernels' has no templates/gguf-kernels/facts.py")


def test_a_facts_file_that_exits_is_a_config_error(project: Path) -> None:
    facts = project / "templates" / "gguf-kernels" / "facts.py"
    facts.write_text("import sys\nsys.exit(0)\n" + facts.read_text())
    _refused(project, "fails to load (SystemExit")


def test_the_repository_declares_both_packages_alike(repo_root: Path) -> None:
    cfg = config.load(repo_root)
    shapes = {(p.templates, p.variants, p.source) for p in cfg.packages}
    assert shapes == {(f"templates/{n}", f"variants/{n}.toml", f"build/{n}/src") for n in cfg.package_names()}


def test_a_package_named_after_another_and_torch_is_refused(project: Path) -> None:
    # CI collects a package's artifacts as "<package>-torch*": "ggml-attn-kernels-torchx" would be collected with
    # ggml-attn-kernels'. Renamed with its variants file and templates, so only the name can be what is refused.
    text = (
        (project / "pyproject.toml").read_text().replace("packages.gguf-kernels", "packages.ggml-attn-kernels-torchx")
    )
    (project / "pyproject.toml").write_text(text)
    (project / "variants" / "gguf-kernels.toml").rename(project / "variants" / "ggml-attn-kernels-torchx.toml")
    (project / "templates" / "gguf-kernels").rename(project / "templates" / "ggml-attn-kernels-torchx")
    _refused(project, "CI's artifact pattern")
