"""The CI matrix of client stacks (.ci/stacks.toml) as data for the shell and as README.md's support table.

python3 .ci/stacks.py rows               # one line per stack: kernels transformers torch lint(0/1)
python3 .ci/stacks.py table              # the Markdown table README.md shows
python3 .ci/stacks.py check README.md    # exit 1 when README.md's generated table is stale
python3 .ci/stacks.py write README.md    # rewrite it
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
START, END = "<!-- generated: support-table -->", "<!-- end generated: support-table -->"


def stacks(path: Path = HERE / "stacks.toml") -> list[dict]:
    rows = tomllib.loads(path.read_text())["stack"]
    for row in rows:
        missing = {"kernels", "transformers", "torch"} - set(row)
        if missing:
            raise SystemExit(f"{path}: a [[stack]] lacks {sorted(missing)}")
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| kernels | transformers | torch (build and tests) | tested by CI |",
        "|---|---|---|---|",
    ]
    for row in rows:
        what = "the whole suite, lint and types" if row.get("lint") else "the whole suite"
        lines.append(f"| {row['kernels']} | {row['transformers']} | {row['torch']} | {what} |")
    return "\n".join(lines)


def render(readme: str, rows: list[dict]) -> str:
    pattern = re.compile(re.escape(START) + r"\n.*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise SystemExit(f"README.md lacks the markers {START} ... {END}")
    return pattern.sub(lambda _: f"{START}\n{table(rows)}\n{END}", readme)


def main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "table"
    rows = stacks()
    if cmd == "rows":
        for row in rows:
            print(row["kernels"], row["transformers"], row["torch"], int(bool(row.get("lint"))))
        return 0
    if cmd == "table":
        print(table(rows))
        return 0
    if cmd in ("check", "write") and len(argv) == 2:
        path = Path(argv[1])
        current = path.read_text()
        wanted = render(current, rows)
        if cmd == "write":
            path.write_text(wanted)
            return 0
        if current != wanted:
            print(f"{path}'s support table is stale: run `python3 .ci/stacks.py write {path}`", file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
