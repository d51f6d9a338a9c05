"""verify follows the stage protocol (toolkit/core/stage.py): a pure plan naming the variant directories,
an execute that checks exactly those, a Report with ok / exit_code / lines() / to_json(); the verification
record has one owner (toolkit/verify/record.py) and the verify modules import each other without a cycle."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from tests.helpers.hubserver.variants import NAME, host_variant_name, make_variant, write_project
from toolkit.core import config, stage
from toolkit.core.errors import VerifyError
from toolkit.verify import Plan, Request, VerifyOptions, execute, plan, record

REPO = Path(__file__).resolve().parents[2]
FAST = VerifyOptions(check_vendor=False, smoke=False, conformance=False)


def _project(tmp_path: Path) -> tuple[config.Config, Path]:
    root = write_project(tmp_path / "proj")
    return config.load(root), root / "build" / NAME


def _snapshot(d: Path) -> dict[str, int]:
    return {str(p.relative_to(d)): p.stat().st_mtime_ns for p in d.rglob("*")}


def test_plan_is_pure_and_execute_checks_exactly_the_planned_paths(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build)
    before = _snapshot(build)
    p = plan(cfg, Request((), FAST))
    assert _snapshot(build) == before and not (build / record.NAME).exists()  # nothing written
    assert isinstance(p, stage.Plan) and [x.name for x in p.paths] == [host_variant_name()]
    assert p.to_json()["variants"] == [str(build / host_variant_name())]
    # a variant that appears after planning is not verified: execute does what the plan lists, no rediscovery
    make_variant(build, variant="torch213-cxx11-cu130-x86_64-linux", uid="fx00002")
    log: list[str] = []
    report = execute(p, log.append)
    assert [v.variant for v in report.variants] == [host_variant_name()] and log == [host_variant_name()]
    assert set(record.entries(build)) == {host_variant_name()}


def test_a_hand_made_plan_is_honoured(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build)
    other = make_variant(build, variant="torch213-cxx11-cu130-x86_64-linux", uid="fx00002")
    report = execute(Plan(cfg, Request((), FAST), (other,)))
    assert [v.variant for v in report.variants] == [other.name]


def test_the_report_follows_the_protocol(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    v = make_variant(build)
    good = execute(plan(cfg, Request((), FAST)))
    assert isinstance(good, stage.Report) and good.ok and good.exit_code == 0 and stage.exit_code_of(good) == 0
    assert good.lines()[-1] == "verified 1 variant(s); publish may ship them"
    assert all(isinstance(line, str) for line in good.lines()) and json.dumps(good.to_json())
    (v / "_ops.py").unlink()
    bad = execute(plan(cfg, Request((), FAST)))
    assert not bad.ok and bad.exit_code == VerifyError.exit_code == stage.exit_code_of(bad) == 8
    assert bad.lines()[-1].startswith(f"{len(bad.failures())} check(s) failed; first: [fail]")
    assert any(line.startswith("[fail]") and "_ops.py" in line for line in bad.lines())


def test_an_unknown_variant_is_refused_by_the_plan(tmp_path: Path) -> None:
    cfg, build = _project(tmp_path)
    make_variant(build)
    try:
        plan(cfg, Request(("torch999",), FAST))
    except VerifyError as exc:
        assert "no variant 'torch999'" in str(exc)
    else:
        raise AssertionError("an unknown variant name must be refused")


# --- structure ----------------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    """Every toolkit.verify module this file imports, at module level or inside functions."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "toolkit.verify":
                out |= {f"toolkit.verify.{a.name}" for a in node.names}
            elif node.module.startswith("toolkit.verify."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("toolkit.verify.")}
    return out


def test_no_import_cycle_between_verify_modules() -> None:
    modules = {f"toolkit.verify.{p.stem}": p for p in (REPO / "toolkit/verify").glob("*.py") if p.stem != "__init__"}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in path:
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = [c for m in sorted(graph) if (c := cycle_from(m))]
    assert not cycles, " -> ".join(cycles[0])


def test_the_record_file_is_named_in_one_module() -> None:
    """Only toolkit/verify/record.py spells the file name as a value; everyone else asks it."""
    owners = set()
    for path in (REPO / "toolkit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value == ".verified.json":
                owners.add(path.relative_to(REPO).as_posix())
    assert owners == {"toolkit/verify/record.py"}


def test_no_function_in_the_verify_stage_is_over_60_lines() -> None:
    long = []
    for path in sorted((REPO / "toolkit/verify").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.name}:{node.name} ({lines} lines)")
    assert not long, long
