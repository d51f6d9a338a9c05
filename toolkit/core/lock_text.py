"""vendor/UPSTREAM's text: the lock written as TOML by hand-rolled, stable code (sorted where order carries no
meaning, one table per file, each group of tables under the comment that explains it) so that a re-sync of
the same revision gives the same bytes and a review diff reads well. Apart from lock.py (the lock's data,
its parsing and reading) because the writing is a job of its own; `lock.render_lock` joins these lines."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolkit.core.lock import Lock

SCHEMA = 1  # vendor/UPSTREAM's `schema`: what lock.parse_lock accepts


def _q(value: str) -> str:  # a JSON string literal is a valid TOML basic string (same escapes)
    return json.dumps(value)


def _array(values: tuple[str, ...] | list[str], indent: str = "") -> str:
    if len(values) <= 2 and sum(len(v) for v in values) < 60:
        return "[" + ", ".join(_q(v) for v in values) + "]"
    return "[\n" + "".join(f"{indent}  {_q(v)},\n" for v in values) + f"{indent}]"


def _upstream_lines(lock: Lock) -> list[str]:
    lines = [
        "# vendor/UPSTREAM: the pinned upstream of vendor/ggml, written by `ggml-vendor sync`.",
        "# Do not edit by hand: `ggml-vendor sync --check` compares vendor/ against it; re-run sync instead.",
        f"schema = {SCHEMA}",
        "",
        "[upstream]",
        f"url = {_q(lock.upstream)}",
        f"layout = {_q(lock.layout)}",
        f"rev = {_q(lock.rev)}",
        f"commit = {_q(lock.commit)}",
        f"date = {_q(lock.date)}",
        f"subject = {_q(lock.subject)}",
    ]
    if lock.llama_cpp_commit:
        lines.append(f"llama-cpp-commit = {_q(lock.llama_cpp_commit)}  # from scripts/sync-llama.last")
    if lock.ggml_commit:
        lines.append(f"ggml-commit = {_q(lock.ggml_commit)}  # from scripts/sync-ggml.last")
    return lines + ["", "[tool]", f"name = {_q('ggml-vendor')}", f"version = {_q(lock.tool_version)}"]


def _ops_lines(lock: Lock) -> list[str]:
    """Packages, then each op's entries and closures (config order: ops as the project lists them)."""
    lines: list[str] = []
    for name, keys in lock.packages.items():  # absent for a single package
        lines += ["", f"[packages.{_q(name)}]", f"ops = {_array(list(keys))}"]
    for table, per_op in (("entries", lock.entries), ("closures", lock.closures)):
        for op, per_backend in per_op.items():
            lines += ["", f"[{table}.{_q(op)}]"]
            lines += [f"{b} = {_array(v)}" for b, v in per_backend.items()]
    return lines


def _files_lines(lock: Lock) -> list[str]:
    lines: list[str] = []
    for f in sorted(lock.file_info, key=lambda f: f.path):
        lines += ["", f"[files.{_q(f.path)}]", f"sha256 = {_q(f.sha256)}", f"blob = {_q(f.blob)}"]
        lines.append(f"reason = {_q(f.reason)}")
        if f.needed_by:
            lines.append(f"needed-by = {_array(sorted(f.needed_by))}")
        if f.patched_by:
            lines.append(f"patched-by = {_array(list(f.patched_by))}")
    for p in lock.patches:  # application order (file name order)
        lines += ["", "[[patches]]", f"name = {_q(p.name)}", f"sha256 = {_q(p.sha256)}", f"verdict = {_q(p.verdict)}"]
    return lines


def _under_comment(comment: tuple[str, ...], body: list[str]) -> list[str]:
    """A group of tables after the comment that explains them; nothing, not even the comment, for an empty group
    (a lock without that group keeps its bytes)."""
    return ["", *comment, *body] if body else []


_LICENSES_COMMENT = (
    "# Copyright notices stay in the vendored files: `copyright-lines` says where (ggml-vendor status prints them).",
)
_FINGERPRINTS_COMMENT = (
    "# sha256 of the upstream regions our bindings depend on (FINGERPRINTS of ggml_facts and the packages).",
    "[fingerprints]",
)
_BEHAVIOUR_COMMENT = (
    "# sha256 of the functions each op's semantics live in (the packages' BEHAVIOUR): the kernels and",
    "# ggml-cpu's reference, declaration and body apart, comments and whitespace out. The CPU reference",
    "# is read from upstream's git objects at the pin and is not vendored.",
)


def _license_lines(lock: Lock) -> list[str]:
    body: list[str] = []
    for lic in sorted(lock.licenses, key=lambda x: x.path):
        body += ["", f"[licenses.{_q(lic.path)}]", f"spdx = {_array(lic.spdx)}"]
        if lic.copyright_at:
            body.append(f"copyright-lines = [{', '.join(str(n) for n in lic.copyright_at)}]")
    return _under_comment(_LICENSES_COMMENT, body)


def _print_lines(lock: Lock) -> list[str]:
    """Fingerprints of the regions the bindings depend on, and the behaviour prints of each op."""
    fingerprints = [f"{_q(k)} = {_q(v)}" for k, v in sorted(lock.fingerprints.items())]
    behaviour: list[str] = []
    for k in sorted(lock.behaviour):
        b = lock.behaviour[k]
        behaviour += ["", f"[behaviour.{_q(k)}]", f"path = {_q(b.path)}", f"signature = {_q(b.signature)}"]
        behaviour.append(f"body = {_q(b.body)}")
    return _under_comment(_FINGERPRINTS_COMMENT, fingerprints) + _under_comment(_BEHAVIOUR_COMMENT, behaviour)


def lock_lines(lock: Lock) -> list[str]:
    """Every line of the lock's TOML text, in order: same Lock, same lines."""
    sections = (_upstream_lines, _ops_lines, _files_lines, _license_lines, _print_lines)
    return [line for section in sections for line in section(lock)]
