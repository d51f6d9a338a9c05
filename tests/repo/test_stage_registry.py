"""The stage registry (toolkit/stages.py) holds every stage package, and every stage package presents the
protocol the same way: real Request, Plan and Report names in its namespace (no lazy `__getattr__`, no names
that exist only for the type checker), and no submodule named like a function its package exports (a module
`plan.py` beside a function `plan` shadows one or the other, depending on import order). mypy checks each
registry entry against toolkit.core.stage.Stage; this test checks what mypy cannot see."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

from toolkit import stages

# Every stage of the CLI: the pipeline, patch save/drop, the CI fan-out, outdated/update and init.
EXPECTED = {"sync", "patch", "render", "build", "verify", "publish", "ci", "collect", "outdated", "update", "init"}
FACES = ("toolkit.sync", "toolkit.render", "toolkit.build", "toolkit.verify", "toolkit.publish", "toolkit.outdated")


def _stage_modules() -> dict[str, ModuleType]:
    """The registry's stages: each is a module whose names present the protocol."""
    out: dict[str, ModuleType] = {}
    for key, stage in stages.STAGES.items():
        assert isinstance(stage, ModuleType), f"{key}: {stage!r} is not a module"
        out[key] = stage
    return out


def test_the_registry_names_every_stage_once() -> None:
    assert set(stages.STAGES) == EXPECTED
    modules = [m.__name__ for m in _stage_modules().values()]
    assert len(set(modules)) == len(modules), modules


def _protocol_names(module: ModuleType) -> dict[str, object]:
    return {name: vars(module).get(name) for name in ("Request", "Plan", "Report", "plan", "execute")}


def test_each_stage_presents_real_protocol_names() -> None:
    missing = {
        key: [name for name, value in _protocol_names(module).items() if value is None]
        for key, module in _stage_modules().items()
        if key != "init"  # toolkit/init.py names its Plan and Report InitPlan / InitReport
    }
    assert not {k: v for k, v in missing.items() if v}, missing


def _type_checking_only_names(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            names += [a.asname or a.name for imp in node.body if isinstance(imp, ast.ImportFrom) for a in imp.names]
    return names


def face_problems(package: ModuleType) -> list[str]:
    """How a stage package's face breaks the rules above (the checker, tested on its own below)."""
    problems = []
    if "__getattr__" in vars(package):
        problems.append(f"{package.__name__} resolves names lazily (__getattr__)")
    init = Path(package.__file__ or "")
    exported = set(getattr(package, "__all__", ()))
    hidden = sorted(exported & set(_type_checking_only_names(init)))
    if hidden:
        problems.append(f"{package.__name__} exports names only the type checker sees: {hidden}")
    functions = {n for n in exported if callable(vars(package).get(n)) and not isinstance(vars(package)[n], type)}
    for sub in pkgutil.iter_modules([str(init.parent)]):
        if sub.name in functions:
            problems.append(f"{package.__name__}.{sub.name} is a module and a function of its face")
    return problems


def test_no_stage_face_shadows_or_hides_a_name() -> None:
    problems = [p for face in FACES for p in face_problems(importlib.import_module(face))]
    assert problems == []


def test_the_face_check_catches_each_problem(tmp_path: Path) -> None:
    import sys

    pkg = tmp_path / "fakestage"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from fakestage.impl import Report\n"
        "__all__ = ['plan', 'Report']\n"
        "def plan(): ...\n"
        "def __getattr__(name): raise AttributeError(name)\n"
    )
    (pkg / "plan.py").write_text("")
    (pkg / "impl.py").write_text("class Report: ...\n")
    sys.path.insert(0, str(tmp_path))
    try:
        problems = face_problems(importlib.import_module("fakestage"))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("fakestage", None)
    assert problems == [
        "fakestage resolves names lazily (__getattr__)",
        "fakestage exports names only the type checker sees: ['Report']",
        "fakestage.plan is a module and a function of its face",
    ]
