"""Provenance recorded in metadata.json (upstream URL and commit, patches, tool version, dirty flags) checked
against vendor/UPSTREAM, and the vendor/ tree itself checked clean.

The schema (what `build` writes; kernels 0.17.2 tolerates the extra `ggml-vendor` table):

    "upstream": "<git URL of llama.cpp or ggml>",            # top-level kernels field, when it is a URL
    "provenance": {
      "kernel-builder": {"version": "ggml-vendor <version>"},
      "kernel": {"commit": "<40-hex commit of this repository>", "dirty": false},
      "ggml-vendor": {
        "tool-version": "<version>",
        "upstream": {"url": "...", "commit": "<40-hex>", "layout": "ggml|llama.cpp"},
        "patches": [{"name": "0001-x.patch", "sha256": "<hex>"}],
        "dirty": false                                      # vendor/ or rendered sources edited at build time
      }
    }
"""

from __future__ import annotations

import re
from typing import Any

from toolkit import __version__
from toolkit.core.config import Config
from toolkit.core.lock import Lock
from toolkit.verify.findings import FAIL, PASS, WARN, Finding

PROVENANCE_KEY = "ggml-vendor"
_HEX40 = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def check_provenance(variant: str, raw: dict[str, Any] | None, lock: Any | None) -> list[Finding]:
    if raw is None:
        return []
    prov = raw.get("provenance")
    ours = prov.get(PROVENANCE_KEY) if isinstance(prov, dict) else None
    if not isinstance(ours, dict):
        return [
            Finding(
                variant,
                "provenance",
                FAIL,
                f"metadata.json has no provenance.{PROVENANCE_KEY} record",
                "rebuild with ggml-vendor build (it records upstream, patches, tool version, dirty flag)",
            )
        ]
    up = ours.get("upstream")
    up = up if isinstance(up, dict) else {}
    commit = str(up.get("commit", ""))
    listed = ours.get("patches")
    patches: list[Any] = listed if isinstance(listed, list) else []
    kernel = prov.get("kernel") if isinstance(prov, dict) else None
    found = _record_problems(ours, up, commit)
    if isinstance(kernel, dict) and kernel.get("dirty"):
        found.append(
            (
                WARN,
                "this repository had uncommitted changes at build time",
                "commit, then rebuild, so the build is reproducible",
            )
        )
    if lock is not None:
        found += _lock_problems(commit, patches, lock)
    f = [Finding(variant, "provenance", status, msg, remedy) for status, msg, remedy in found]
    if not any(x.failed for x in f):
        f.insert(
            0,
            Finding(
                variant, "provenance", PASS, f"upstream {up.get('url')} @ {commit[:12]}, {len(patches)} patches, clean"
            ),
        )
    return f


def _record_problems(ours: dict[str, Any], up: dict[str, Any], commit: str) -> list[tuple[str, str, str]]:
    """(status, what is wrong, what to do) for the record itself: upstream, patches, tool version, dirty flag."""
    out: list[tuple[str, str, str]] = []
    if not up.get("url") or not _HEX40.match(commit):
        out.append(
            (
                FAIL,
                f"upstream url/commit missing or not a full commit id ({commit!r})",
                "rebuild after ggml-vendor sync",
            )
        )
    if not isinstance(ours.get("patches"), list):
        out.append((FAIL, "provenance lists no patches (use [] for none)", "rebuild"))
    if not ours.get("tool-version"):
        out.append((FAIL, "tool-version missing", "rebuild"))
    elif ours["tool-version"] != __version__:
        out.append((WARN, f"built by ggml-vendor {ours['tool-version']}, this is {__version__}", "rebuild to be sure"))
    if ours.get("dirty") is not False:
        what = (
            "built from a dirty tree (vendor/ or rendered sources differed from the lock)"
            if ours.get("dirty")
            else "dirty flag missing"
        )
        out.append((FAIL, what, "restore vendor/ (ggml-vendor sync --check), re-render and rebuild"))
    return out


def _lock_problems(commit: str, patches: list[Any], lock: Any) -> list[tuple[str, str, str]]:
    """The build must come from what vendor/UPSTREAM pins: the same upstream commit and patches."""
    out: list[tuple[str, str, str]] = []
    if commit and commit != lock.commit:
        out.append(
            (
                FAIL,
                f"built from upstream {commit[:12]} but vendor/UPSTREAM pins {lock.commit[:12]}",
                "rebuild after the last sync",
            )
        )
    locked = sorted((p.name, p.sha256) for p in lock.patches)
    built = sorted((str(p.get("name")), str(p.get("sha256"))) for p in patches if isinstance(p, dict))
    if locked != built:
        out.append(
            (
                FAIL,
                f"patches in the build {[n for n, _ in built]} != locked {[n for n, _ in locked]}",
                "rebuild after the last sync",
            )
        )
    return out


def check_vendor_clean(cfg: Config) -> tuple[list[Finding], Lock | None]:
    """(findings, lock) for the project's vendor/: refuse a dirty tree (edited, missing, extra files)."""
    from toolkit.sync import read_vendor, tree_on_record

    # read once, and where a killed sync's swap awaits recovery, the tree recovery puts back (pure: a plan calls it)
    vendor = read_vendor(tree_on_record(cfg.vendor_dir))
    lock = vendor.lock
    if lock is None:
        return [
            Finding(
                "*", "vendor", FAIL, "vendor/UPSTREAM is missing: nothing is pinned", "run ggml-vendor sync --rev REV"
            )
        ], None
    dirty = vendor.findings()
    if dirty:
        shown = "; ".join(d.line().strip() for d in dirty[:3]) + (
            f" (+{len(dirty) - 3} more)" if len(dirty) > 3 else ""
        )
        return [
            Finding(
                "*",
                "vendor",
                FAIL,
                f"vendor/ is dirty: {shown}",
                "ggml-vendor sync --check shows all; re-sync to restore it",
            )
        ], lock
    return [Finding("*", "vendor", PASS, f"vendor/ matches vendor/UPSTREAM ({lock.commit[:12]})")], lock
