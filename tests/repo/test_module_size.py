"""No module in toolkit/ is over about 400 lines (beside test_code_size's 60-line functions): a module that
grows past it holds more than one job and splits by job. The modules already over it are listed as known debt
with their size today as their ceiling: they may shrink (lower the number, or drop the entry once under the
limit), never grow."""

from __future__ import annotations

from pathlib import Path

TOOLKIT = Path(__file__).resolve().parents[2] / "toolkit"
MAX_LINES = 400

# Known debt: module (relative to toolkit/) -> its line count when the limit came, the most it may have now.
# Every module that was over the limit when it came has since been split by job; the list stays for the next one.
DEBT: dict[str, int] = {}


def module_sizes(root: Path = TOOLKIT) -> dict[str, int]:
    """{module relative to `root`: its number of lines} for every .py (toolkit/data/ holds no code of ours)."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(root.rglob("*.py"))
        if not path.relative_to(root).as_posix().startswith("data/")
    }


def oversized(sizes: dict[str, int], debt: dict[str, int], limit: int = MAX_LINES) -> list[str]:
    """Every module over `limit` that is not known debt, and every debt that grew past its ceiling."""
    out = []
    for rel, n in sorted(sizes.items()):
        ceiling = debt.get(rel, limit)
        if n > ceiling:
            why = f"grew past its recorded {ceiling}" if rel in debt else f"is over {limit} lines"
            out.append(f"toolkit/{rel}: {n} lines ({why}: split it by job)")
    return out


def test_no_module_over_the_limit_or_its_recorded_debt() -> None:
    assert oversized(module_sizes(), DEBT) == []


def test_the_debt_list_is_current() -> None:
    sizes = module_sizes()
    gone = sorted(rel for rel in DEBT if rel not in sizes)
    paid = sorted(rel for rel, n in sizes.items() if rel in DEBT and n <= MAX_LINES)
    assert not gone, f"listed as debt but no longer there (drop them): {gone}"
    assert not paid, f"under the limit now (drop them from DEBT): {paid}"


def test_the_measure_catches_a_long_module_and_a_growing_debt(tmp_path: Path) -> None:
    (tmp_path / "small.py").write_text("x = 1\n")
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "debt.py").write_text("x = 1\n" * 450)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "skeleton.py").write_text("x = 1\n" * 1000)  # toolkit/data is not ours to split
    sizes = module_sizes(tmp_path)
    assert sizes == {"small.py": 1, "long.py": MAX_LINES + 1, "debt.py": 450}
    assert oversized(sizes, {"debt.py": 450}) == [
        f"toolkit/long.py: {MAX_LINES + 1} lines (is over 400 lines: split it by job)"
    ]
    assert oversized(sizes, {"debt.py": 449, "long.py": 500}) == [
        "toolkit/debt.py: 450 lines (grew past its recorded 449: split it by job)"
    ]
