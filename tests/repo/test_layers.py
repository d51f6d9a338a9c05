"""The layers of toolkit/: `toolkit.core` is the floor every stage stands on, so it imports no stage, no
command and nothing of the CLI (toolkit/core may import only itself and the package root's version). An
arrow up from core (as projectlock once imported toolkit.commands to name a lock's holder) would make the
floor depend on what stands on it. Imports are read with ast, deferred ones included, as in
test_import_graph; imports under `if TYPE_CHECKING:` never run and are left out."""

from __future__ import annotations

from pathlib import Path

from tests.repo.test_import_graph import TOOLKIT, import_graph

ALLOWED_ROOT = "toolkit"  # the package root: __version__


def layer_violations(graph: dict[str, set[str]], floor: str, root: str = ALLOWED_ROOT) -> list[str]:
    """Every import from a module of `floor` (a package, dotted) to a module outside it, the root aside."""
    inside = (floor, f"{floor}.")
    return [
        f"{module} imports {target}"
        for module in sorted(m for m in graph if m.startswith(inside))
        for target in sorted(graph[module])
        if not target.startswith(inside) and target != root
    ]


def test_core_imports_no_stage_no_command_and_no_cli() -> None:
    assert layer_violations(import_graph(), "toolkit.core") == []


def test_the_layer_check_catches_an_import_up_from_core(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    for sub in ("core", "sync", "commands"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("__version__ = '1'\n")
    (pkg / "core" / "ok.py").write_text("from pkg import __version__\nfrom pkg.core import other\n")
    (pkg / "core" / "other.py").write_text("")
    (pkg / "core" / "up.py").write_text("def holder():\n    from pkg.commands import NAMES\n")  # deferred: read too
    (pkg / "core" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sync import Plan\n"
    )
    (pkg / "sync" / "stage.py").write_text("from pkg.core import ok\n")  # down into core: allowed
    graph = import_graph(pkg, "pkg")
    assert layer_violations(graph, "pkg.core", root="pkg") == ["pkg.core.up imports pkg.commands"]


def test_the_real_core_is_what_the_check_reads() -> None:
    graph = import_graph()
    core = [m for m in graph if m.startswith("toolkit.core.")]
    assert "toolkit.core.projectlock" in core and len(core) >= 10, core
    assert (TOOLKIT / "core" / "projectlock.py").is_file()


def face_violations(graph: dict[str, set[str]], client: str, faces: tuple[str, ...]) -> list[str]:
    """Every import from a module of `client` into a module *inside* one of `faces` (its package's face, the
    `__init__`, is the one door)."""
    return [
        f"{module} imports {target} (use {face}'s face)"
        for module in sorted(m for m in graph if m == client or m.startswith(f"{client}."))
        for target in sorted(graph[module])
        for face in faces
        if target.startswith(f"{face}.")
    ]


def test_publish_goes_through_the_faces_of_verify_and_sync() -> None:
    assert face_violations(import_graph(), "toolkit.publish", ("toolkit.verify", "toolkit.sync")) == []


def test_the_face_check_catches_a_reach_inside(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    for sub in ("verify", "publish"):
        (pkg / sub).mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "verify" / "__init__.py").write_text("from pkg.verify.record import verdict\n")
    (pkg / "verify" / "record.py").write_text("def verdict(): ...\n")
    (pkg / "publish" / "__init__.py").write_text("")
    (pkg / "publish" / "good.py").write_text("from pkg.verify import verdict\n")
    (pkg / "publish" / "bad.py").write_text("def f():\n    from pkg.verify.record import verdict\n")
    graph = import_graph(pkg, "pkg")
    assert face_violations(graph, "pkg.publish", ("pkg.verify",)) == [
        "pkg.publish.bad imports pkg.verify.record (use pkg.verify's face)"
    ]
