"""No function in toolkit/ is over 60 lines (the code style rule)."""

from __future__ import annotations

import ast
from pathlib import Path

TOOLKIT = Path(__file__).resolve().parents[2] / "toolkit"
MAX_LINES = 60


def long_functions(root: Path = TOOLKIT) -> dict[str, dict[str, int]]:
    """{file relative to toolkit/: {function: lines}} for every function over MAX_LINES (decorators aside)."""
    found: dict[str, dict[str, int]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("data/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    found.setdefault(rel, {})[node.name] = lines
    return found


def test_no_function_over_60_lines() -> None:
    over = [
        f"toolkit/{rel}: {name} ({n} lines)" for rel, funcs in long_functions().items() for name, n in funcs.items()
    ]
    assert not over, f"functions over {MAX_LINES} lines (split them): {over}"


def test_the_measure_catches_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "long.py").write_text(f"def too_long():\n{body}\n\n\ndef short():\n    return 1\n")
    assert long_functions(tmp_path) == {"long.py": {"too_long": MAX_LINES + 1}}
