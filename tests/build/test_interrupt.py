"""A Ctrl-C of `ggml-vendor build` once the plan is made says which variants build/ holds anew, read back from
disk (issue 33 item 3), never "previous state kept" after the variants were replaced. The stage's plan and
execute are stood in for by ones that write build/<variant>/ as the executor does (no compiler here); the
runner, the read-back and the printing are the real ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

import pytest
from typer.testing import CliRunner

from tests.helpers.fixture_repos import make_project
from toolkit.build import outdir
from toolkit.core.config import Config

V1, V2 = "torch214-cxx11-cu130-x86_64-linux", "torch214-cxx11-cu130-aarch64-linux"


def _write_variant(out: Path, text: str) -> None:
    """An intact build/<variant>/: its files and a metadata.json whose digest lists them."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "__init__.py").write_text(text)
    digest = {"files": {"__init__.py": outdir.b64_sha256_file(out / "__init__.py")}}
    (out / "metadata.json").write_text(json.dumps({"version": 1, "digest": digest}))


def _ctrl_c(*_a: object, **_k: object) -> NoReturn:
    raise KeyboardInterrupt


@pytest.mark.parametrize("lands", ["while printing", "before any variant", "between variants"])
def test_ctrl_c_says_which_variants_build_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lands: str) -> None:
    import toolkit.build as build_stage
    from toolkit.cli import app

    root = make_project(tmp_path / "proj", "embedded")
    for v in (V1, V2):
        _write_variant(root / "build" / v, "old\n")
    before = tuple((v, root / "build" / v, outdir.fingerprint(root / "build" / v)) for v in (V1, V2))
    planned = SimpleNamespace(plan=SimpleNamespace(project=SimpleNamespace(root=root)), before=before, notes=())

    def execute(_plan: object, _log: object) -> SimpleNamespace:
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


def test_a_variant_left_incomplete_is_named(tmp_path: Path) -> None:
    out = tmp_path / "build" / V1
    _write_variant(out, "old\n")
    was = outdir.fingerprint(out)
    (out / "__init__.py").write_text("edited by hand\n")
    line = outdir.read_back(tmp_path / "build", ((V1, out, was),)).one_line()
    assert line.startswith(f"build/ holds no intact {V1}")


def _stand_in(monkeypatch: pytest.MonkeyPatch, roots: dict[str, Path], ctrl_c_planning: str | None = None) -> None:
    """build's plan and execute stood in for, per package (`roots`: package -> its build/<name>/): execute
    writes a new V1 and prints its report; a Ctrl-C lands while `ctrl_c_planning` (a package) is planned."""
    import toolkit.build as build_stage

    def plan(cfg: Config, _request: object, _log: object = None) -> SimpleNamespace:
        if cfg.name == ctrl_c_planning:
            raise KeyboardInterrupt
        out = roots[cfg.name] / V1
        # read_back is handed build/<name>/ (the stand-in's project root is the package's build dir's parent)
        project = SimpleNamespace(root=roots[cfg.name].parent)
        return SimpleNamespace(plan=SimpleNamespace(project=project), before=((V1, out, outdir.fingerprint(out)),))

    def execute(planned: SimpleNamespace, _log: object) -> SimpleNamespace:
        _write_variant(planned.before[0][1], "new\n")
        return SimpleNamespace(lines=lambda: ["built"])

    monkeypatch.setattr(build_stage, "plan", plan)
    monkeypatch.setattr(build_stage, "execute", execute)


def test_a_ctrl_c_in_a_later_package_says_what_the_earlier_one_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`build` runs every package of a family: a Ctrl-C while the second is planned, once the first package's
    variant was replaced, says so (read back from disk), not "previous state kept"."""
    from tests.core.test_family import QUANT_TEMPLATES, SECOND
    from toolkit.cli import app

    root = make_project(tmp_path / "proj", "embedded")
    with (root / "pyproject.toml").open("a") as fh:
        fh.write(SECOND)
    (root / "templates" / "fixture-quant").mkdir(parents=True)
    (root / "templates" / "fixture-quant" / "facts.py").write_text(QUANT_TEMPLATES["facts.py"])
    first, second = "fixture-kernels", "fixture-quant"
    roots = {first: tmp_path / "b1" / "build", second: tmp_path / "b2" / "build"}
    for d in roots.values():
        _write_variant(d / V1, "old\n")
    _stand_in(monkeypatch, roots, ctrl_c_planning=second)
    res = CliRunner().invoke(app, ["build", "-C", str(root)])
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]
    assert last.startswith("interrupted:"), res.output
    assert f"package {first}: build/ holds the new build of {V1} (read back from disk)" in last, res.output
    assert f"package {second}: not changed" in last, res.output
    assert (roots[first] / V1 / "__init__.py").read_text() == "new\n"
    assert (roots[second] / V1 / "__init__.py").read_text() == "old\n"


@pytest.mark.parametrize("lands", ["as the project lock is released", "during the read-back, a second time"])
def test_a_ctrl_c_after_the_report_is_still_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lands: str
) -> None:
    """The report printed in full, a Ctrl-C while the command lets the project lock go (after the runner
    returned) says what build/ holds; so does one whose read-back a second Ctrl-C hits (it is not cut short)."""
    import contextlib
    import os
    import signal

    import toolkit.core.projectlock as projectlock
    from toolkit.cli import app

    root = make_project(tmp_path / "proj", "embedded")
    build = tmp_path / "b" / "build"
    _write_variant(build / V1, "old\n")
    _stand_in(monkeypatch, {"fixture-kernels": build})
    real_lock = projectlock.project_lock

    @contextlib.contextmanager
    def lock_then_ctrl_c(*args: Any, **kwargs: Any) -> Iterator[None]:
        with real_lock(*args, **kwargs):
            yield
        raise KeyboardInterrupt

    monkeypatch.setattr(projectlock, "project_lock", lock_then_ctrl_c)
    if lands.startswith("during"):
        real_read = outdir.variant_intact

        def read_hit_by_a_second_ctrl_c(out: Path) -> bool:
            os.kill(os.getpid(), signal.SIGINT)
            return real_read(out)

        monkeypatch.setattr(outdir, "variant_intact", read_hit_by_a_second_ctrl_c)
    res = CliRunner().invoke(app, ["build", "-C", str(root)])
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]
    assert last.startswith("interrupted:"), res.output
    assert f"build/ holds the new build of {V1} (read back from disk) — nothing to undo" in last, res.output
