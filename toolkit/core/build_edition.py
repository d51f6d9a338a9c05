"""Which build.toml edition the packages render, and how the editions differ (docs/hub-contract.md §1.3).

A package declares the oldest kernels client it loads under (``KERNELS_MINVER``, its ``kernels-minver``). Its
build.toml must parse under that client, because the client's own parser is what validates it at render and
build time, so the edition rendered is the newest one that client reads (``EDITION_READ_BY``). Raising
``KERNELS_MINVER`` to a client of the next row switches every package to that edition; nothing else changes.

What the released parsers (``kernels._rust.Build.open``) do, probed for each release:

* kernels 0.17.2 reads edition 5 and refuses edition 6: "unsupported build edition 6; upgrade kernel-builder".
* kernels 0.18.3 and 0.19.1 read edition 6. They still read edition 5, upgrading it in memory and printing
  (to stderr, from Rust: no Python warning) "... upgrading to edition 6 in memory. Run `kernel-builder
  update-build` to persist the upgrade, the Nix builder requires edition 6." Edition 7 is refused.

Edition 6 against edition 5, as those parsers report it (unknown-key and unknown-variant errors list the
accepted names): every ``[kernel.<name>]`` table names its ``language`` instead of its ``backend``
(``cpp-cuda``, ``cpp-rocm``, ``cpp-metal``, ``cpp-cpu``, ``cpp-xpu``, ``rust-cpu``; 0.19.1 adds
``rust-cuda-oxide`` and ``rust-cutile``), a ``backend`` key there is an error, and the per-language keys are
edition 5's per-backend ones (cuda-capabilities, cuda-flags, cuda-minver, rocm-archs, hip-flags, sycl-flags,
cxx-flags, depends, include, src; Rust kernels take ``cargo-manifest``). ``[general]`` gains ``build-layout``
(0.19.1 only, and only in edition 6). ``[general]``'s other keys, ``[general.hub]``, ``[torch]`` and the
``depends`` names are the same in both.

kernel-builder's Nix builder requires edition 6, so the Nix engine stages an edition-6 copy
(:func:`to_edition`); the committed files stay on ``BUILD_EDITION``.
"""

from __future__ import annotations

import re

# The oldest kernels client the packages load under: their declared kernels-minver (one source: the adapter).
from toolkit.core.kernels_client import KERNELS_MINVER

# (first client release that reads it, edition): the newest edition each kernels release parses. Releases
# probed: 0.17.2 (edition 5), 0.18.3 and 0.19.1 (edition 6); 0.18.0-0.18.2 were never published.
EDITION_READ_BY: tuple[tuple[str, int], ...] = (("0.17.2", 5), ("0.18.3", 6))

# What kernel-builder's Nix builder requires (its parser's upgrade notice says so).
NIX_EDITION = 6

# Edition 6's kernel `language` for each backend our packages build (C++/CUDA/HIP/Objective-C++ sources).
LANGUAGE_OF_BACKEND = {"cuda": "cpp-cuda", "rocm": "cpp-rocm", "metal": "cpp-metal", "cpu": "cpp-cpu", "xpu": "cpp-xpu"}
BACKEND_OF_LANGUAGE = {lang: backend for backend, lang in LANGUAGE_OF_BACKEND.items()} | {
    "rust-cpu": "cpu",
    "rust-cuda-oxide": "cuda",
    "rust-cutile": "cuda",
}


def _version(text: str) -> tuple[int, ...]:
    """A release number as a comparable tuple ("0.19.1" -> (0, 19, 1)); local/dev suffixes are dropped."""
    core = re.match(r"\d+(\.\d+)*", text.strip())
    if core is None:
        raise ValueError(f"not a kernels release number: {text!r}")
    return tuple(int(p) for p in core.group(0).split("."))


def edition_for(client: str) -> int:
    """The newest build.toml edition that kernels `client` parses."""
    found = [edition for first, edition in EDITION_READ_BY if _version(first) <= _version(client)]
    if not found:
        raise ValueError(f"kernels {client} is older than every client known to read a build.toml edition")
    return found[-1]


# The edition the packages' build.toml files are rendered in.
BUILD_EDITION = edition_for(KERNELS_MINVER)


def kernel_selector(backend: str, edition: int = BUILD_EDITION) -> str:
    """The line of a `[kernel.<name>]` table that says what it builds: `backend = "cuda"` (edition 5) or
    `language = "cpp-cuda"` (edition 6)."""
    if edition >= 6:
        return f'language = "{LANGUAGE_OF_BACKEND[backend]}"'
    return f'backend = "{backend}"'


def backend_of(kernel_table: dict[str, object]) -> str:
    """The backend a parsed `[kernel.<name>]` table builds for, in either edition."""
    language = kernel_table.get("language")
    if language is not None:
        return BACKEND_OF_LANGUAGE.get(str(language), str(language))
    return str(kernel_table.get("backend"))


_TABLE = re.compile(r"^\[(?P<name>[^\[\]]+)\]\s*(#.*)?$")
_EDITION = re.compile(r"^edition\s*=\s*\d+\s*$")
_BACKEND = re.compile(r'^backend\s*=\s*"(?P<backend>[a-z]+)"\s*$')


def to_edition(text: str, edition: int) -> str:
    """`text`, a build.toml rendered by ggml-vendor in edition 5, rewritten in `edition` (5 or 6), comments
    and layout kept: what `kernel-builder update-build` persists, for the files our templates produce (one
    key per line, no inline tables). Used where a consumer needs a newer edition than the packages declare."""
    if edition not in (5, 6):
        raise ValueError(f"build.toml edition {edition} is not one ggml-vendor renders (5 or 6)")
    out, table = [], ""
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        head = _TABLE.match(body)
        if head:
            table = head.group("name").strip()
        elif table == "general" and _EDITION.match(body):
            line = f"edition = {edition}\n"
        elif table.startswith("kernel.") and (m := _BACKEND.match(body)):
            line = kernel_selector(m.group("backend"), edition) + "\n"
        out.append(line)
    return "".join(out)
