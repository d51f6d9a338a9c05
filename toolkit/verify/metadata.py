"""metadata.json as the kernels client reads it (its Metadata type), our own stricter rules on top, and
the digest recomputed the way kernels computes it (Digest.hash_variant)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolkit.core.kernels_client import KERNELS_MINVER, curated_python_depends, kernels_type, kernels_types
from toolkit.verify.findings import FAIL, PASS, Finding

# Keys every client >= 0.14 needs (docs/hub-contract.md §2.6); the Rust parser accepts some of them absent.
REQUIRED_KEYS = ("name", "id", "version", "license", "python-depends", "backend")


def load_metadata(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(raw JSON dict, error) for build/<variant>/metadata.json."""
    try:
        raw = json.loads((path / "metadata.json").read_text())
    except FileNotFoundError:
        return None, "metadata.json is missing"
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, f"metadata.json is not valid JSON: {exc}"
    if not isinstance(raw, dict):
        return None, "metadata.json is not a JSON object"
    return raw, None


def compute_digest(path: Path) -> dict[str, str]:
    """{relpath: base64 sha256} exactly as kernels computes it (skips metadata.json, bytecode)."""
    Digest, DigestAlgorithm = kernels_types("Digest", "DigestAlgorithm")

    return dict(Digest.hash_variant(DigestAlgorithm.SHA256, str(path)).files)


def check_metadata(
    variant: str, path: Path, raw: dict[str, Any] | None, err: str | None, *, name: str, version: int, license: str
) -> list[Finding]:
    if raw is None:
        return [
            Finding(
                variant,
                "metadata",
                FAIL,
                err or "metadata.json unreadable",
                "rebuild the variant: clients >= 0.14 refuse to load without it",
            )
        ]
    Metadata = kernels_type("Metadata")
    try:
        meta = Metadata.read_from_file(str(path / "metadata.json"))
    except ValueError as exc:
        return [
            Finding(
                variant,
                "metadata",
                FAIL,
                f"kernels' parser rejects metadata.json: {exc}",
                "write the keys docs/hub-contract.md §2.6 requires",
            )
        ]
    backend = str(meta.backend.backend_type).lower()
    f = [
        Finding(variant, "metadata", FAIL, msg, remedy)
        for msg, remedy in _problems(raw, meta, backend, name, version, license)
    ]
    f += _check_digest(variant, path, raw)
    if not any(x.failed for x in f):
        f.insert(
            0,
            Finding(
                variant, "metadata", PASS, f"kernels parses it: {meta.name} v{meta.version} {backend} id={meta.id}"
            ),
        )
    return f


def _problems(
    raw: dict[str, Any], meta: Any, backend: str, name: str, version: int, license: str
) -> list[tuple[str, str]]:
    """(what is wrong, what to do) for each rule of ours that kernels' parser does not enforce."""
    out: list[tuple[str, str]] = []
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        out.append(
            (
                f"metadata.json lacks {', '.join(missing)}",
                "older clients (>= 0.14) fail to parse it; write every required key",
            )
        )
    if str(meta.name) != name:
        out.append((f"name {meta.name} != configured {name}", "rebuild from this project's configuration"))
    if meta.version != version:
        out.append(
            (
                f"version {meta.version} != configured major version {version}",
                "rebuild, or change [tool.ggml-vendor] version",
            )
        )
    if meta.license != license:
        out.append((f"license {meta.license!r} != configured {license!r}", "rebuild from this project's configuration"))
    curated = curated_python_depends(backend)
    unknown = [d for d in meta.python_depends if d not in curated]
    if unknown:
        out.append((f"python-depends not in kernels' curated list: {unknown}", f"use only {sorted(curated) or 'none'}"))
    out += _minver_problems(meta)
    return out


def _minver_problems(meta: Any) -> list[tuple[str, str]]:
    """kernels-minver is honest: present, no newer than the oldest client we support (KERNELS_MINVER: newer
    clients refuse a variant whose minver is above them), and no newer than the client verifying it."""
    import kernels

    Version = kernels_type("Version")
    if meta.kernels_minver is None:
        return [
            ("metadata.json has no kernels-minver", f"rebuild: it records {KERNELS_MINVER}, the oldest client tested")
        ]
    out = []
    if meta.kernels_minver > Version.from_str(KERNELS_MINVER):
        out.append(
            (
                f"kernels-minver {meta.kernels_minver} is newer than the oldest supported client {KERNELS_MINVER}",
                "rebuild with this ggml-vendor, or raise the oldest stack CI tests first",
            )
        )
    if Version.from_str(kernels.__version__.split(".dev")[0]) < meta.kernels_minver:
        out.append(
            (
                f"kernels-minver {meta.kernels_minver} is newer than the kernels installed here",
                "lower kernels-minver or upgrade kernels",
            )
        )
    return out


def _check_digest(variant: str, path: Path, raw: dict[str, Any]) -> list[Finding]:
    digest = raw.get("digest")
    if not isinstance(digest, dict) or "files" not in digest:
        return [
            Finding(
                variant,
                "digest",
                FAIL,
                "metadata.json has no digest",
                "compute it last, after the variant is final (kernels Digest.hash_variant)",
            )
        ]
    if str(digest.get("algorithm", "")).lower() != "sha256":
        return [
            Finding(
                variant,
                "digest",
                FAIL,
                f"digest algorithm {digest.get('algorithm')!r} is not sha256",
                "write a sha256 digest",
            )
        ]
    actual = compute_digest(path)
    recorded = digest.get("files") or {}
    missing = sorted(set(recorded) - set(actual))
    unknown = sorted(set(actual) - set(recorded))
    changed = sorted(p for p in set(actual) & set(recorded) if actual[p] != recorded[p])
    if missing or unknown or changed:
        parts = [
            f"{label}: {', '.join(v[:4])}"
            for label, v in (("changed", changed), ("not in digest", unknown), ("missing", missing))
            if v
        ]
        return [
            Finding(
                variant,
                "digest",
                FAIL,
                "files differ from the recorded digest — " + "; ".join(parts),
                "the variant was modified after the build: rebuild it",
            )
        ]
    return [Finding(variant, "digest", PASS, f"digest matches {len(actual)} files (kernels' algorithm)")]
