"""The kernels adapter (toolkit/core/kernels_client.py) against the real client installed here — CI runs this file
under kernels 0.17.2, 0.18.3 and 0.19.1, each in its own virtualenv: the variant parser and resolver of either
module layout, the compiled data types from `kernels._rust`, the layer validator, and the CLI verb that lists
variants. Nothing here fakes a kernels release."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

kernels = pytest.importorskip("kernels", reason="kernels is not installed: there is no client to adapt to")

from packaging.version import Version  # noqa: E402

from toolkit.build.inputs import validate_build_toml  # noqa: E402
from toolkit.core.errors import BuildError  # noqa: E402
from toolkit.core.kernels_client import (  # noqa: E402
    KernelsBindingError,
    client_version,
    host_accepts,
    kernels_type,
    kernels_types,
    list_variants_argv,
    parse_variant,
)
from toolkit.verify.metadata import compute_digest  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CLIENT = Version(client_version())
NEW_GRAMMAR = CLIENT >= Version("0.19")  # kernels 0.19 reads torch-2.14-cxx11-cuda-13.0-cpython-3.9-abi3-...


def test_the_installed_client_is_in_the_declared_range() -> None:
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    (req,) = [Requirement(r) for r in requires("ggml-vendor") or [] if Requirement(r).name == "kernels"]
    assert CLIENT in req.specifier, f"kernels {CLIENT} is outside pyproject's {req}"


@pytest.mark.parametrize(
    ("name", "backend", "os", "torch", "toolkit"),
    [
        ("torch214-cxx11-cu130-x86_64-linux", "cuda", "linux", "2.14", "13.0"),
        ("torch215-cxx11-cu132-aarch64-linux", "cuda", "linux", "2.15", "13.2"),
        ("torch214-cxx11-rocm72-x86_64-linux", "rocm", "linux", "2.14", "7.2"),
        ("torch214-metal-aarch64-darwin", "metal", "darwin", "2.14", None),
    ],
)
def test_legacy_names_parse_the_same_on_every_client(
    name: str, backend: str, os: str, torch: str, toolkit: str | None
) -> None:
    v = parse_variant(name)
    assert (v.is_arch, v.framework, v.backend, v.os) == (True, "torch", backend, os)
    assert (v.framework_version, v.backend_version) == (torch, toolkit)


def test_the_new_grammar_is_read_only_from_0_19_on() -> None:
    # Published names must be ones every supported client selects: 0.17/0.18 read the new grammar as a noarch
    # variant with a nonsense backend and never pick it (docs/hub-contract.md).
    v = parse_variant("torch-2.14-cxx11-cuda-13.0-cpython-3.9-abi3-x86_64-linux")
    if NEW_GRAMMAR:
        got = (v.is_arch, v.backend, v.os, v.framework_version, v.backend_version)
        assert got == (True, "cuda", "linux", "2.14", "13.0")
    else:
        assert not v.is_arch and v.backend != "cuda", v


def test_legacy_stable_abi_names_parse_on_every_client() -> None:
    v = parse_variant("torch-stable-abi213-cu130-x86_64-linux")
    assert v.is_arch and v.framework == "torch-stable-abi" and v.backend == "cuda" and v.backend_version == "13.0"


def test_unparseable_names_raise_value_error() -> None:
    with pytest.raises(ValueError):
        parse_variant("pytorch-cu130-x86_64-linux")


def test_the_resolver_rejects_another_os_with_its_own_reason() -> None:
    pytest.importorskip("torch", reason="kernels' resolver detects the system through torch")
    ok, why = host_accepts("torch214-metal-aarch64-darwin")
    assert not ok and why  # this Linux host never loads a macOS variant, and kernels says why


def test_data_types_come_from_the_compiled_module(tmp_path: Path) -> None:
    digest, algorithm = kernels_types("Digest", "DigestAlgorithm")
    assert digest is sys.modules["kernels._rust"].Digest and algorithm.SHA256 is not None
    (tmp_path / "a.py").write_text("x = 1\n")
    assert set(compute_digest(tmp_path)) == {"a.py"}
    with pytest.raises(KernelsBindingError, match="has no NoSuchType"):
        kernels_type("NoSuchType")


def _rendered_build_toml() -> str:
    """The first package's build.toml as render writes it (rendered files are not committed)."""
    from toolkit import render
    from toolkit.core import config

    content: str = render.plan(config.load(REPO)).by_path()["build.toml"].content
    return content


def test_build_toml_is_validated_by_the_clients_parser(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    (good / "build.toml").write_text(_rendered_build_toml())
    validate_build_toml(good, None)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "build.toml").write_text("[general]\nname = 'x'\nedition = 5\nbackends = ['nope']\n")
    with pytest.raises(BuildError, match="rejected by kernels' parser"):
        validate_build_toml(bad, None)


def test_a_missing_data_module_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kernels._rust", None)  # as on an install without the compiled part
    with pytest.raises(KernelsBindingError, match="install a kernels release in the range pyproject.toml declares"):
        kernels_type("Metadata")
    assert issubclass(KernelsBindingError, ImportError)


def test_the_variants_verb_exists_in_the_clients_cli() -> None:
    script = Path(sys.executable).with_name("kernels")
    if not script.exists():
        pytest.skip("kernels' console script is not installed beside this Python")
    verb = list_variants_argv("org/repo")[0]
    proc = subprocess.run([str(script), verb, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "repo" in proc.stdout.lower()


def test_the_parsers_edition_notice_stays_off_the_terminal(tmp_path: Path) -> None:
    # kernels 0.18+ print an edition notice from Rust straight to descriptor 2 for every edition-5 file; a command's
    # one-line error would otherwise come with a second line. Other output of the parser still gets through.
    (tmp_path / "build.toml").write_text(_rendered_build_toml())
    raw = "import sys; from kernels._rust import Build; Build.open(sys.argv[1])"
    ours = "import sys; from toolkit.core.kernels_client import open_build; open_build(sys.argv[1])"
    direct = subprocess.run([sys.executable, "-c", raw, str(tmp_path)], capture_output=True, text=True, timeout=120)
    adapted = subprocess.run([sys.executable, "-c", ours, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert direct.returncode == 0 and adapted.returncode == 0, (direct.stderr, adapted.stderr)
    if "edition 5" not in _rendered_build_toml() and "edition = 5" not in _rendered_build_toml():
        pytest.skip("the rendered build.toml is not edition 5: the client prints no notice to keep off")
    if CLIENT >= Version("0.18"):
        assert "edition" in direct.stderr  # what the adapter exists to hold back
    assert adapted.stderr == "", adapted.stderr
