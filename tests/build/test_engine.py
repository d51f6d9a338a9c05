"""The build engine is a visible choice (--engine local|nix|auto): a `nix` on PATH is used only when asked for
and usable (recent, nix-command + flakes enabled), and a failing nix build names its step and its log. The
`nix` here is a script written by the test (no Nix needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.helpers import BUILD_KERNEL_OUT, built_variants, copy_build_kernel
from toolkit.build.envs import probe_nix

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "build_kernel"
HOST_ROW = "torch214-cxx11-cu130-x86_64-linux"

NIX_DEBIAN_28 = """#!/bin/sh
# Debian's nix-bin 2.8 with no nix.conf: `nix-command` (and flakes) are off.
case "$1" in
  --version) echo "nix (Nix) 2.8.0";;
  *) echo "error: experimental Nix feature 'nix-command' is disabled; use '--extra-experimental-features nix-command' to override" >&2; exit 1;;
esac
"""

NIX_RECENT = """#!/bin/sh
case "$1" in
  --version) echo "nix (Nix) 2.24.9";;
  config) printf 'cores = 0\\nexperimental-features = %s\\nmax-jobs = 1\\n' "$FAKE_NIX_FEATURES";;
  run) echo "building '/nix/store/xyz-kernel.drv'..."; echo "error: boom from the fake nix" >&2; exit 1;;
  *) exit 1;;
esac
"""


def _fake_nix(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch, features: str = "nix-command flakes") -> Path:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    nix = bindir / "nix"
    nix.write_text(body)
    nix.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NIX_FEATURES", features)
    return nix


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    copy_build_kernel(root)
    monkeypatch.setenv("GGML_VENDOR_BUILD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GGML_VENDOR_ENVS", str(tmp_path / "envs"))
    return root


def _build(project: Path, *args: str) -> Result:
    from toolkit.cli import app

    return CliRunner().invoke(app, ["build", "-C", str(project), *args])


def test_probe_reads_version_and_features(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = probe_nix(str(_fake_nix(tmp_path, NIX_DEBIAN_28, monkeypatch)))
    assert old.version == "2.8.0" and not old.usable and "too old" in old.problem
    (tmp_path / "fakebin").rename(tmp_path / "old")
    for features, usable in (("nix-command flakes", True), ("nix-command", False), ("", False)):
        d = tmp_path / f"f{len(features)}"
        d.mkdir()
        monkeypatch.setenv("PATH", os.environ["PATH"])
        info = probe_nix(str(_fake_nix(d, NIX_RECENT, monkeypatch, features)))
        assert info.version == "2.24.9" and info.usable is usable, info
        if not usable:
            assert "flakes" in info.problem and "disabled" in info.problem


def test_a_nix_on_path_does_not_take_over_the_default_build(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reported bug: with Debian's nix-bin installed, every variant of the host's system went to nix.
    _fake_nix(tmp_path, NIX_DEBIAN_28, monkeypatch)
    res = _build(project, "--all", "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    executors = {v["name"]: v["executor"] for v in json.loads(res.stdout)["variants"]}
    assert "nix" not in executors.values(), executors
    res = _build(project, "--all", "--dry-run", "--json", "--engine", "local")
    assert res.exit_code == 0, res.output
    assert "nix" not in {v["executor"] for v in json.loads(res.stdout)["variants"]}


def test_engine_nix_refuses_an_unusable_nix_in_one_line(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nix(tmp_path, NIX_DEBIAN_28, monkeypatch)
    res = _build(project, "--all", "--engine", "nix")
    assert res.exit_code == 7, res.output
    assert "nix 2.8.0" in res.output and "too old" in res.output and "--engine local" in res.output
    # the fix says what to install and what to enable, by name and where (not "enable them")
    assert "enable them" not in res.output and "install Nix >= 2.18" in res.output, res.output
    assert "experimental-features = nix-command flakes" in res.output and "nix.conf" in res.output
    assert built_variants(project) == []


def test_engine_nix_refuses_nix_without_flakes(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nix(tmp_path, NIX_RECENT, monkeypatch, features="ca-derivations")
    res = _build(project, "--all", "--engine", "nix")
    assert res.exit_code == 7, res.output
    assert "nix-command and flakes disabled" in res.output
    assert "experimental-features = nix-command flakes" in res.output and "nix.conf" in res.output


def test_engine_nix_plans_the_host_system_only(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nix(tmp_path, NIX_RECENT, monkeypatch)
    res = _build(project, "--all", "--dry-run", "--json", "--engine", "nix")
    assert res.exit_code == 0, res.output
    executors = {v["name"]: v["executor"] for v in json.loads(res.stdout)["variants"]}
    assert executors[HOST_ROW] == "nix"
    assert executors["torch214-cxx11-cu130-aarch64-linux"] is None


def test_a_failing_nix_build_names_its_step_and_log(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nix(tmp_path, NIX_RECENT, monkeypatch)
    res = _build(project, "--all", "--variant", HOST_ROW, "--engine", "nix", "--json")
    assert res.exit_code == 7, res.output
    row = next(v for v in json.loads(res.stdout.split("\n}\n")[0] + "\n}")["variants"] if v["name"] == HOST_ROW)
    assert row["result"] == "failed"
    assert row["failed_step"].startswith("nix run .#build-and-copy"), row
    log = Path(row["log"])
    assert log.is_file() and "boom from the fake nix" in log.read_text()
    assert "boom from the fake nix" in row["tail"]
    assert not (project / BUILD_KERNEL_OUT / HOST_ROW).exists()


def test_unknown_engine_is_a_config_error(project: Path) -> None:
    res = _build(project, "--all", "--dry-run", "--engine", "docker")
    assert res.exit_code == 2 and "--engine 'docker'" in res.output


def test_demo_with_a_failing_nix_names_the_step_and_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The reported message was "failed at : [...] — full log:  —": step and log were empty for nix results.
    pytest.importorskip("torch", reason="the demo builds the variant of this interpreter's torch")
    from toolkit.demo import run_demo

    _fake_nix(tmp_path, NIX_RECENT, monkeypatch)
    monkeypatch.setenv("GGML_VENDOR_BUILD_CACHE", str(tmp_path / "cache"))
    report = run_demo(Path(__file__).resolve().parents[2], workspace=tmp_path / "ws", engine="nix")
    build = next(s for s in report.stages if s.name.startswith("build"))
    assert build.status == "failed", build
    assert "failed at nix run .#build-and-copy" in build.detail and "boom from the fake nix" in build.detail
    log = build.detail.split("full log: ")[1].strip()
    assert log and Path(log).is_file()
