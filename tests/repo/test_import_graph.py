"""The import graph of toolkit/ (issue 18): no import cycle among its modules, and `build --all` reads one way
from the command to the compiler call — a module later in the build's call chain never imports one earlier
in it, and the helpers the chain calls import none of the chain (a helper that did would call back into a
file the reader already left). docs/architecture.md ("Reading the build") lists the chain.

Imports are read with ast from every toolkit/**/*.py, deferred ones (inside functions) included; imports
under `if TYPE_CHECKING:` are left out, since they never run (annotations name the data a module is
handed, they do not call back)."""

from __future__ import annotations

import ast
from pathlib import Path

TOOLKIT = Path(__file__).resolve().parents[2] / "toolkit"

# The call chain of `ggml-vendor build --all`, in order (docs/architecture.md, "Reading the build").
BUILD_CHAIN = (
    "toolkit.commands.build",
    "toolkit.app",
    "toolkit.build",
    "toolkit.build.stage",
    "toolkit.build.steps",
    "toolkit.build.local",
)
PROTOCOL = "toolkit.core.stage"  # the one module every stage may return into


def modules(root: Path, package: str = "toolkit") -> dict[str, Path]:
    """{dotted module name: file} for every .py under `root` (a package's __init__ is the package)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: anywhere in the file except under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.If) and _type_checking_only(node):
            children = list(node.orelse)
        todo += children
    return found


def _owner(name: str, known: dict[str, Path]) -> str | None:
    """The module of `known` that `name` (a module, or a name inside one) lives in."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative: resolved against the importing module's package
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    # `from toolkit.build import zig` names the submodule zig; `from toolkit.build.steps import X` the module
    return [f"{base}.{a.name}" for a in node.names] + [base]


def import_graph(root: Path = TOOLKIT, package: str = "toolkit") -> dict[str, set[str]]:
    """{module: the modules of the package it imports at run time}."""
    known = modules(root, package)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            names = _targets(node, module, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):  # a submodule if one is named, else the module itself
                subs = [n for n in names[:-1] if n in known]
                names = subs if len(subs) == len(names) - 1 else [*subs, names[-1]]
            for name in names:
                owner = _owner(name, known)
                if owner is not None and owner != module:
                    graph[module].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def backward_imports(graph: dict[str, set[str]], chain: tuple[str, ...], helpers: set[str]) -> list[str]:
    """Every import that returns up `chain`: a chain module importing an earlier one, or a helper (a module
    the chain calls that is not in it) importing any chain module. The protocol module is exempt."""
    bad = []
    for i, module in enumerate(chain):
        bad += [f"{module} imports {t} (earlier in the chain)" for t in sorted(graph[module] & set(chain[:i]))]
    for module in sorted(helpers - set(chain)):
        bad += [f"{module} imports {t} (a helper calling back)" for t in sorted(graph[module] & set(chain))]
    return [b for b in bad if not b.split(" imports ")[1].startswith(PROTOCOL)]


def test_no_import_cycle_in_toolkit() -> None:
    assert cycles(import_graph()) == []


def test_build_all_reads_one_way_from_the_command_to_the_compiler() -> None:
    graph = import_graph()
    assert set(BUILD_CHAIN) <= set(graph), "a module of the chain moved: update the chain and the doc"
    # what the chain calls: the build's own modules and the shared core (and sync, for the vendor check)
    helpers = {m for m in graph if m.startswith(("toolkit.build.", "toolkit.core.", "toolkit.sync."))}
    assert backward_imports(graph, BUILD_CHAIN, helpers) == []


def test_the_chain_in_the_doc_is_the_tested_one() -> None:
    doc = (TOOLKIT.parent / "docs" / "architecture.md").read_text()
    section = doc.split("## Reading the build", 1)[1].split("\n## ", 1)[0]
    files = modules(TOOLKIT)
    paths = [f"`{files[m].relative_to(TOOLKIT.parent).as_posix()}`" for m in BUILD_CHAIN]
    missing = [p for p in paths if p not in section]
    assert not missing, f"docs/architecture.md's 'Reading the build' does not name {missing}"
    assert sorted(paths, key=section.index) == paths, "the doc lists the chain in another order"


def test_the_measures_catch_a_cycle_and_a_call_back(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")  # deferred and relative: still read
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    (pkg / "d.py").write_text("import pkg.c\n")
    graph = import_graph(pkg, "pkg")
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"]]
    assert graph["pkg.c"] == set() and graph["pkg.d"] == {"pkg.c"}  # type-only imports never run
    assert backward_imports(graph, ("pkg.a", "pkg.sub.b"), {"pkg.d"}) == [
        "pkg.sub.b imports pkg.a (earlier in the chain)"
    ]
    assert backward_imports(graph, ("pkg.c",), {"pkg.d"}) == ["pkg.d imports pkg.c (a helper calling back)"]
