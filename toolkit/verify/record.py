"""The verification record, build/.verified.json: its name, its format, and every read and write of it.

verify writes one entry per variant it checked; collect merges the entries an artifact brings (with where it
came from); publish and collect read them. An entry applies only while the variant's files hash to its
`tree_sha256`, so a verdict cannot outlive the bytes it was given for.

    {"variants": {"<variant>": {"tree_sha256": ..., "ok": bool, "tool_version": ..., "hub_compliant": bool,
                                "failures": ["<finding line>", ...], "conformance": "passed: ..." | ...,
                                "collected": {"artifact": ..., "rechecked": [...], "runner": {...}}}}}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.core import fs
from toolkit.core.hashing import tree_sha256 as tree_sha256  # the one tree hash (what a verdict applies to)
from toolkit.core.records import fields_json

NAME = ".verified.json"
# What collect keeps of the runner's own verdict next to the entry it merges.
RUNNER_KEYS = ("ok", "hub_compliant", "tool_version", "failures", "conformance")


def read(directory: Path) -> dict[str, Any] | None:
    """The record in `directory` (build/ or an artifact) as a dict, or None when it is missing or unreadable."""
    try:
        doc = json.loads((directory / NAME).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def entries(directory: Path) -> dict[str, dict[str, Any]]:
    """variant -> entry (only well-formed entries)."""
    variants = (read(directory) or {}).get("variants")
    if not isinstance(variants, dict):
        return {}
    return {k: v for k, v in variants.items() if isinstance(v, dict)}


def entry(directory: Path, variant: str) -> dict[str, Any]:
    return entries(directory).get(variant, {})


def write(directory: Path, variants: Mapping[str, Mapping[str, Any]]) -> None:
    """Replace the record with `variants`, atomically (a reader sees the old or the new record, never half)."""
    text = json.dumps({"variants": dict(variants)}, indent=2, sort_keys=True) + "\n"
    fs.atomic_write(directory / NAME, text.encode())


def snapshot(directory: Path) -> bytes | None:
    """The record's exact bytes (None: there is none), for `restore` when a larger change is undone."""
    path = directory / NAME
    return path.read_bytes() if path.is_file() else None


def restore(directory: Path, before: bytes | None) -> None:
    """Put back what `snapshot` saw (removing the record if there was none)."""
    path = directory / NAME
    if before is None:
        path.unlink(missing_ok=True)
    else:
        fs.atomic_write(path, before)


@dataclass(frozen=True)
class Verdict:
    """What verify concluded about one variant, as the record stores it."""

    variant: str
    tree_sha256: str
    ok: bool
    tool_version: str
    hub_compliant: bool
    failures: tuple[str, ...]
    conformance: str

    def to_entry(self) -> dict[str, Any]:
        return fields_json(self, "tree_sha256 ok tool_version hub_compliant failures conformance", failures=list)


def record_verdicts(build_dir: Path, verdicts: Iterable[Verdict]) -> None:
    """verify's write: replaces the entries of these variants only; where `collect` brought a variant from stays
    on record while its bytes are the same."""
    if not build_dir.is_dir():
        return
    variants = entries(build_dir)
    for v in verdicts:
        prev = variants.get(v.variant, {})
        variants[v.variant] = v.to_entry()
        if prev.get("collected") and prev.get("tree_sha256") == v.tree_sha256:
            variants[v.variant]["collected"] = prev["collected"]
    write(build_dir, variants)


def merge_collected(build_dir: Path, collected: Iterable[tuple[str, Mapping[str, Any], str, list[str]]]) -> None:
    """collect's write: (variant, the runner's entry, artifact name, checks re-run here) for each variant
    brought in; the runner's verdict is kept under `collected.runner`."""
    variants = entries(build_dir)
    for variant, runner_entry, artifact, rechecked in collected:
        new = dict(runner_entry)
        runner = {k: runner_entry[k] for k in RUNNER_KEYS if k in runner_entry}
        new["collected"] = {"artifact": artifact, "rechecked": rechecked, "runner": runner}
        variants[variant] = new
    write(build_dir, variants)


def why_unverified(doc: dict[str, Any] | None, variant: str, tree: str) -> str | None:
    """Why an artifact's record does not vouch for `variant` with files hashing to `tree`; None when it does."""
    if doc is None:
        return f"the artifact has no {NAME} (run ggml-vendor verify before uploading)"
    found = (doc.get("variants") or {}).get(variant)
    if not isinstance(found, dict):
        return f"its {NAME} has no record for {variant}"
    if not found.get("ok"):
        fails = "; ".join(found.get("failures", [])[:1]) or "no details"
        return f"verify failed on its runner: {fails}"
    if found.get("tree_sha256") != tree:
        return "its files differ from the ones verify passed on the runner"
    return None


def verdict(build_dir: Path, variant_path: Path, *, official_hub: bool = False) -> tuple[bool, str]:
    """(publishable, why not) for one variant; the files must hash to what verify passed. `official_hub`: also
    require a Hub-compliant ABI (no waived manylinux ceiling)."""
    found = entry(build_dir, variant_path.name)
    if not found:
        return False, "never verified"
    if not found.get("ok"):
        return False, "verify failed: " + "; ".join(found.get("failures", [])[:2])
    if found.get("tree_sha256") != tree_sha256(variant_path):
        return False, "files changed since it was verified"
    if official_hub and found.get("hub_compliant") is False:
        return False, "built with the host toolchain: not manylinux_2_28, so not for huggingface.co"
    return True, ""


def conformance_status(build_dir: Path, variant: str) -> str:
    """The conformance status verify recorded for `variant`."""
    return str(entry(build_dir, variant).get("conformance") or "not run (verified before the conformance gate existed)")
