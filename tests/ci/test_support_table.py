"""README.md's support table is what CI runs: it is generated from .ci/stacks.toml, the file .ci/run reads its
virtualenvs from, and each row's kernels release is one its transformers release accepts (read from the installed
transformers where it is the row's, from the published pins otherwise)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from toolkit.core.kernels_client import KERNELS_MINVER

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / ".ci" / "stacks.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ci_stacks", STACKS)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_table_is_generated_from_the_ci_stacks() -> None:
    proc = subprocess.run(
        [sys.executable, str(STACKS), "check", str(REPO / "README.md")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_a_stale_table_is_caught(tmp_path: Path) -> None:
    mod = _module()
    readme = (REPO / "README.md").read_text().replace("| 0.17.2 | 5.22.2 |", "| 0.17.2 | 5.21.0 |")
    assert mod.render(readme, mod.stacks()) != readme


def test_the_oldest_stack_is_the_minver_every_variant_records() -> None:
    rows = _module().stacks()
    assert min(Version(r["kernels"]) for r in rows) == Version(KERNELS_MINVER)


def test_every_stack_is_inside_pyprojects_ranges() -> None:
    reqs = {Requirement(r).name: Requirement(r) for r in requires("ggml-vendor") or []}
    for row in _module().stacks():
        for name in ("kernels", "transformers"):
            assert Version(row[name]) in reqs[name].specifier, (row, str(reqs[name]))


def test_the_installed_transformers_accepts_the_installed_kernels() -> None:
    # transformers pins one kernels minor per release; outside it `is_kernels_available()` is False and no Hub
    # kernel is used. The installed pair must be one CI lists, and transformers itself must accept it.
    try:
        tf, kv = version("transformers"), version("kernels")
    except PackageNotFoundError as exc:
        pytest.skip(f"{exc.name} is not installed: no installed pair to check")
    rows = {(r["kernels"], r["transformers"]) for r in _module().stacks()}
    if (kv, tf) not in rows:
        pytest.skip(f"kernels {kv} with transformers {tf} is not one of CI's stacks (a local mix)")
    from transformers.utils.import_utils import is_kernels_available

    assert is_kernels_available(), f"transformers {tf} refuses kernels {kv}: fix .ci/stacks.toml"
