"""CLI commands: each a request builder and a printer, registered and run by toolkit.app's `@command`.

COMMAND_MODULES names them, in the order they register: the entry point (toolkit/cli.py) imports them
from here."""

COMMAND_MODULES = (
    "sync",
    "status",
    "patch",
    "render",
    "variants",
    "build",
    "verify",
    "publish",
    "demo",
    "ci",
    "collect",
    "init",
    "outdated",
    "update",
)
