"""Entry point of the `ggml-vendor` command: imports the command modules so they register on the app.

Each command lives in toolkit/commands/<name>.py and registers itself with toolkit.app's @command. When the
command line names one command, only that module is imported: the stages pull in git, jinja2, torch
helpers and huggingface_hub, and a no-op `sync` should not pay for `publish`'s imports.
"""

from __future__ import annotations

import os
import signal
import sys

_STARTING = (
    b"interrupted: nothing was done (Ctrl-C while ggml-vendor was starting) \xe2\x80\x94 run the command again\n"
)


def _interrupted_while_starting(_signum: int, _frame: object) -> None:
    """Ctrl-C before a command runs (while the tool imports, parses its options, prints help): nothing has
    been read or written yet, so one line and exit 130 at once, not an import's traceback."""
    os.write(2, _STARTING)
    os._exit(130)


def _catch_ctrl_c_while_starting() -> None:
    """Until a command's body starts (toolkit.app.guarded hands Ctrl-C back to Python and its own handling).
    A SIGINT that was ignored when we started (a background job of a script) stays ignored."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _interrupted_while_starting)


# Started as the command (its console script imports this module, or `python -m toolkit.cli` runs it): the
# handler goes in before this module's own imports, not only once main() runs. A library import (tests,
# embedding: `from toolkit.cli import app`) keeps its caller's Ctrl-C.
if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "ggml-vendor":
    _catch_ctrl_c_while_starting()

# After the start-up handler: a Ctrl-C while these load is one line too.
import importlib  # noqa: E402
from typing import Any  # noqa: E402

from toolkit.commands import COMMAND_MODULES  # noqa: E402

# Options the group itself takes before the command, with the value that follows them.
_GROUP_OPTIONS_WITH_VALUE = ("-C", "--project")


def _first_word(argv: list[str]) -> str | None:
    """The first word that is neither an option nor the value of a group option (`-C PATH build`)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _GROUP_OPTIONS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _register(argv: list[str]) -> None:
    named = [a for a in argv if a in COMMAND_MODULES]
    # Only the first non-option word can be the command; anything else (help, typos) registers all, so
    # `--help` lists every command and typer's "No such command" message stays accurate.
    first = _first_word(argv)
    wanted = (first,) if named and first == named[0] else COMMAND_MODULES
    for name in wanted:
        importlib.import_module(f"{__package__}.commands.{name}")


def main() -> None:
    _catch_ctrl_c_while_starting()  # (again: a caller may import this module as a library, then call main())
    _register(sys.argv[1:])
    from toolkit.app import app

    app()


def __getattr__(name: str) -> Any:
    """`from toolkit.cli import app` (tests, embedding) gets the app with every command registered."""
    if name == "app":
        _register([])
        from toolkit.app import app

        return app
    raise AttributeError(name)


if __name__ == "__main__":
    main()
