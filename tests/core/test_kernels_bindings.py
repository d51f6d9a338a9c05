"""kernels' data types are found whichever module the installed release ships them in: `kernels._rust` (<= 0.17),
`kernels._data` (0.18, which transformers 5.23+ require), or the public `kernels-data` package where it has the
type. Each case hides the other modules (None in sys.modules makes their import fail, as on a release without
them) and runs the real validators: build.toml through Build.open, metadata through Metadata."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import kernels  # noqa: F401  (imported before any module is hidden: kernels itself imports its bindings)
import pytest

from toolkit.build.inputs import validate_build_toml
from toolkit.core.errors import BuildError
from toolkit.core.kernels_bindings import KernelsBindingError, kernels_type, kernels_types
from toolkit.verify.metadata import compute_digest

REPO = Path(__file__).resolve().parents[2]
REAL = pytest.importorskip("kernels._rust")  # the compiled module of the pinned release (0.17.x)


def _only(monkeypatch: pytest.MonkeyPatch, present: dict[str, types.ModuleType]) -> None:
    """Make exactly `present` importable among the three binding modules."""
    for name in ("kernels._data", "kernels._rust", "kernels_data"):
        monkeypatch.setitem(sys.modules, name, present.get(name))


def _fake(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(mod, k, v)
    return mod


def _project(tmp_path: Path, text: str | None = None) -> Path:
    root = tmp_path / "proj"
    root.mkdir(parents=True)
    (root / "build.toml").write_text(text if text is not None else (REPO / "build.toml").read_text())
    return root


def _renamed() -> types.ModuleType:
    """kernels 0.18's layout: the same compiled types under the name `kernels._data`."""
    return _fake("kernels._data", **{n: getattr(REAL, n) for n in REAL.__all__ if hasattr(REAL, n)})


@pytest.mark.parametrize("present", ["kernels._data", "kernels._rust"])
def test_build_toml_validation_runs_with_either_module(monkeypatch, tmp_path: Path, present: str) -> None:
    _only(monkeypatch, {present: _renamed() if present == "kernels._data" else REAL})
    validate_build_toml(_project(tmp_path), None)  # the repository's own build.toml parses
    bad = _project(tmp_path / "bad", "[general]\nname = 'x'\nedition = 5\nbackends = ['nope']\n")
    with pytest.raises(BuildError, match="rejected by kernels' parser"):
        validate_build_toml(bad, None)


def test_the_renamed_module_is_preferred_over_the_old_one(monkeypatch) -> None:
    marker = object()
    _only(monkeypatch, {"kernels._data": _fake("kernels._data", Build=marker), "kernels._rust": REAL})
    assert kernels_type("Build") is marker


def test_the_public_package_serves_the_types_it_has(monkeypatch, tmp_path: Path) -> None:
    # kernels-data 0.16 carries Digest/Metadata/Version but no Build.
    public = _fake("kernels_data", Digest=REAL.Digest, DigestAlgorithm=REAL.DigestAlgorithm)
    _only(monkeypatch, {"kernels_data": public})
    (tmp_path / "a.py").write_text("x = 1\n")
    assert set(compute_digest(tmp_path)) == {"a.py"}
    with pytest.raises(
        KernelsBindingError, match=r"Build.*kernels\._data \(not installed\).*kernels_data \(has no Build\)"
    ):
        kernels_type("Build")
    # a render/build run without kernels' parser is refused with the reason, never skipped silently
    with pytest.raises(ImportError):
        validate_build_toml(_project(tmp_path), None)


def test_types_used_together_come_from_one_module(monkeypatch) -> None:
    # _data has Digest but (in this made-up release) no DigestAlgorithm: both come from _rust, never mixed.
    _only(monkeypatch, {"kernels._data": _fake("kernels._data", Digest=object()), "kernels._rust": REAL})
    digest, algorithm = kernels_types("Digest", "DigestAlgorithm")
    assert digest is REAL.Digest and algorithm is REAL.DigestAlgorithm


def test_no_module_at_all_names_what_to_install(monkeypatch) -> None:
    _only(monkeypatch, {})
    with pytest.raises(KernelsBindingError, match="install the kernels version pyproject.toml pins"):
        kernels_type("Metadata")
    assert issubclass(KernelsBindingError, ImportError)  # callers that treat kernels as optional still can
