"""Generates the reference parts of docs/commands.md from the app itself (every command's help and options,
and the exit-code table), so that help, docs and README cannot diverge: `python -m toolkit.docgen` rewrites
them, `python -m toolkit.docgen --check` exits 6 when the committed file is stale (a test runs it).

The file's prose is written by hand; each generated part sits between `<!-- generated: NAME -->` and
`<!-- end generated: NAME -->` and is replaced whole.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from typing import Any

from toolkit.core.errors import RenderError, exit_code_markdown

DOC = Path("docs") / "commands.md"
_BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n).*?(<!-- end generated: (?P=name) -->)", re.S)
NOTICE = "<!-- generated from the app by `python -m toolkit.docgen`: edit toolkit/help.py or the option, not this -->"


def _leaf_commands() -> list[tuple[str, Any]]:
    """(`ggml-vendor name [sub]`, click command) for every command, in the app's order."""
    import typer.main

    from toolkit.cli import app

    out: list[tuple[str, Any]] = []
    for name, cmd in typer.main.get_command(app).commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", None)
        if subs:
            out += [(f"ggml-vendor {name} {sub}", sc) for sub, sc in subs.items()]
        else:
            out.append((f"ggml-vendor {name}", cmd))
    return out


def _literal_help(text: str | None) -> str:
    """The help text as `--help` prints it, minus click's no-rewrap markers."""
    lines = [ln for ln in inspect.cleandoc(text or "").splitlines() if ln.strip() != "\b"]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _spelling(param: Any) -> str:
    if param.param_type_name == "argument":
        return f"`{(param.metavar or param.name).upper()}`" + (" (repeatable)" if param.nargs == -1 else "")
    names = ", ".join(f"`{o}`" for o in (*param.opts, *param.secondary_opts))
    return names + (" (repeatable)" if getattr(param, "multiple", False) else "")


def _default(param: Any) -> str:
    default = param.default
    if param.param_type_name == "argument" or default in (None, False, (), []):
        return ""
    if getattr(param, "show_default", True) is False:
        return ""
    return f"`{default}`"


def _options_table(cmd: Any) -> list[str]:
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for param in cmd.params:
        if param.name == "help":
            continue
        meaning = _cell(getattr(param, "help", None) or "")
        if getattr(param, "envvar", None):
            meaning += f" (env: `{param.envvar}`)"
        rows.append(f"| {_spelling(param)} | {_default(param)} | {meaning} |")
    return rows


def reference() -> str:
    """Every command: its help text (literal, as --help prints it) and its options."""
    import typer.main

    from toolkit.cli import app

    group = typer.main.get_command(app)
    parts = [NOTICE, "", "### `ggml-vendor`", "", "```text", _literal_help(group.help), "```", ""]
    parts += [*_options_table(group), ""]
    for title, cmd in _leaf_commands():
        parts += [f"### `{title}`", "", "```text", _literal_help(cmd.help), "```", ""]
        parts += [*_options_table(cmd), ""]
    return "\n".join(parts)


def exit_codes() -> str:
    return "\n".join([NOTICE, "", exit_code_markdown(), ""])


GENERATORS = {"reference": reference, "exit-codes": exit_codes}


def generate(text: str) -> str:
    """`text` with every generated block replaced by what the app says now."""

    def fill(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise RenderError(f"{DOC}: unknown generated block {name!r}", f"use one of {sorted(GENERATORS)}")
        return m.group(1) + GENERATORS[name]() + m.group(3)

    out = _BLOCK.sub(fill, text)
    missing = [n for n in GENERATORS if f"<!-- generated: {n} -->" not in text]
    if missing:
        raise RenderError(f"{DOC} lacks the generated block(s) {missing}", "restore the markers from git")
    return out


def main(argv: list[str] | None = None, root: Path | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = (root or Path(__file__).resolve().parents[1]) / DOC
    current = path.read_text(encoding="utf-8")
    wanted = generate(current)
    if "--check" in argv:
        if current != wanted:
            print(f"{DOC} is stale: run `python -m toolkit.docgen` and commit the result", file=sys.stderr)
            return RenderError.exit_code
        return 0
    if current != wanted:
        path.write_text(wanted, encoding="utf-8")
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
