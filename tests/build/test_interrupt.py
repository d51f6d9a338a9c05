"""A Ctrl-C of `ggml-vendor build` once the plan is made says which variants build/ holds anew, read back from
disk (issue 33 item 3), never "previous state kept" after the variants were replaced. The stage's plan and
execute are stood in for by ones that write build/<variant>/ as the executor does (no compiler here); the
runner, the read-back and the printing are the real ones."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from tests.helpers.fixture_repos import make_project
from toolkit.build import outdir

V1, V2 = "torch214-cxx11-cu130-x86_64-linux", "torch214-cxx11-cu130-aarch64-linux"


def _write_variant(out: Path, text: str) -> None:
    """An intact build/<variant>/: its files and a metadata.json whose digest lists them."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "__init__.py").write_text(text)
    digest = {"files": {"__init__.py": outdir.b64_sha256_file(out / "__init__.py")}}
    (out / "metadata.json").write_text(json.dumps({"version": 1, "digest": digest}))


def _ctrl_c(*_a, **_k):  # type: ignore[no-untyped-def]
    raise KeyboardInterrupt


@pytest.mark.parametrize("lands", ["while printing", "before any variant", "between variants"])
def test_ctrl_c_says_which_variants_build_holds(tmp_path, monkeypatch, lands) -> None:  # type: ignore[no-untyped-def]
    import toolkit.build as build_stage
    from toolkit.cli import app

    root = make_project(tmp_path / "proj", "embedded")
    for v in (V1, V2):
        _write_variant(root / "build" / v, "old\n")
    before = tuple((v, root / "build" / v, outdir.fingerprint(root / "build" / v)) for v in (V1, V2))
    planned = SimpleNamespace(plan=SimpleNamespace(project=SimpleNamespace(root=root)), before=before, notes=())

    def execute(_plan, _log):  # type: ignore[no-untyped-def]
        for i, v in enumerate((V1, V2)):
            if lands == "before any variant" or (lands == "between variants" and i == 1):
                raise KeyboardInterrupt
            _write_variant(root / "build" / v, "new\n")
        return SimpleNamespace(lines=_ctrl_c)  # the report's printing is cut short

    monkeypatch.setattr(build_stage, "plan", lambda *_a, **_k: planned)
    monkeypatch.setattr(build_stage, "execute", execute)
    res = CliRunner().invoke(app, ["build", "-C", str(root)])
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]
    expected = {
        "while printing": f"build/ holds the new build of {V1}, {V2} (read back from disk) — nothing to undo",
        "before any variant": "build/ is as it was: no variant was replaced (read back from disk)",
        "between variants": f"build/ holds the new build of {V1}; {V2} as before (read back from disk)",
    }[lands]
    assert last.startswith("interrupted:") and expected in last, res.output


def test_a_variant_left_incomplete_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "build" / V1
    _write_variant(out, "old\n")
    was = outdir.fingerprint(out)
    (out / "__init__.py").write_text("edited by hand\n")
    line = outdir.read_back(tmp_path / "build", ((V1, out, was),)).one_line()
    assert line.startswith(f"build/ holds no intact {V1}")
