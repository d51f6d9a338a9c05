"""What `patch save NAME` and `patch drop NAME` mean by NAME: which patch of the series it designates (its file
name, its name without `.patch` or without `NNNN-`, or its number NNNN alone), and for a save the file to write
(the designated one refreshed, or the next number), with its description. Refusals are one PatchError each."""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolkit.core.errors import PatchError
from toolkit.sync.patch_plans import MAX_NAME, NAME_RE
from toolkit.sync.patches import message_of

__all__ = ["SaveTarget", "check_name", "match", "save_target"]


def match(existing: list[str], name: str) -> str | None:
    """The file in `existing` that `name` designates: its file name, without `.patch`, without `NNNN-`, or
    its number NNNN alone (what the series is spoken of by: "refresh 0001")."""
    for n in existing:
        stem = n.removesuffix(".patch")
        if name in (n, stem) or (re.match(r"^\d{4}-", stem) and name in (stem[5:], stem[:4])):
            return n
    return None


@dataclass(frozen=True)
class SaveTarget:
    """The patch file `patch save` writes and the description it carries."""

    name: str  # NNNN-<name>.patch
    refreshed: bool  # it replaces a patch of the series (the one `name` designates)
    message: str


def save_target(name: str, message: str | None, patches: list[tuple[str, bytes]], edited: list[str]) -> SaveTarget:
    """The patch to write for `patch save NAME [-m MESSAGE]`, refusing what cannot be saved."""
    target = match([n for n, _ in patches], name)
    if target is None and re.fullmatch(r"\d{4}", name):  # a number names a patch of the series, never a new one
        have = ", ".join(n for n, _ in patches) or "none"
        raise PatchError(
            f"no patch numbered {name} in vendor/patches (have: {have})",
            "name an existing patch to refresh it, or give a new one a name with a letter, e.g. gdn-decode-vectorised",
        )
    if not edited and not (target is not None and message is not None):  # a refresh may change only the description
        raise PatchError(
            "no edits to save: vendor/ggml matches its pin and patches",
            "edit files under vendor/ggml first" + (f" (to refresh {target})" if target else ""),
        )
    old = dict(patches)[target] if target is not None else None
    return SaveTarget(target or next_name(name, patches), target is not None, description(message, old))


def description(message: str | None, refreshed: bytes | None) -> str:
    """The description to save: `message`, else the refreshed patch's own (a new patch must be given one)."""
    if message is not None and not message.strip():
        raise PatchError("the description is empty", "pass -m 'what the patch changes and why'")
    if message is None:
        message = message_of(refreshed) if refreshed is not None else ""
        if not message:
            raise PatchError("a new patch needs a description", "pass -m 'what the patch changes and why'")
    return message


def next_name(name: str, patches: list[tuple[str, bytes]]) -> str:
    """NNNN-<name>.patch numbered after the last patch of the series, so that it applies last."""
    m = NAME_RE.match(name)
    assert m is not None  # check_name has refused anything else
    numbers = [int(n[:4]) for n, _ in patches if re.match(r"^\d{4}-", n)]
    return f"{(max(numbers) + 1 if numbers else 1):04d}-{m.group(2)}.patch"


def check_name(name: str) -> None:
    m = NAME_RE.match(name or "")
    if not m or "/" in name:
        raise PatchError(
            f"{name!r} is not a patch name", "use letters, digits, '.', '_' and '-', e.g. gdn-decode-vectorised"
        )
    if len(name) > MAX_NAME:
        raise PatchError(
            f"the patch name ({len(name)} characters) is too long for a file name",
            f"use at most {MAX_NAME} characters, e.g. gdn-decode-vectorised",
        )
