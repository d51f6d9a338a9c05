"""Metal variants: the metallib (a shipped file or bytes embedded in the .so) parses, holds every kernel the
binding dispatches, and its language version loads on the variant's declared minimum macOS. The format
itself is toolkit/build/metallib.py's business (parse / find_embedded / check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.core import ggml_facts as facts
from toolkit.verify.findings import FAIL, PASS, Finding
from toolkit.verify.objfile import macho_minos


def required_kernels(cfg: Any) -> tuple[str, ...]:
    """Host names the package's Metal binding looks up for its ops: its facts' METAL_KERNELS (loaded through
    toolkit.core.package_facts, the loader render uses)."""
    from toolkit.build import metal
    from toolkit.core import package_facts

    return metal.required_kernels([op.name for op in cfg.ops], package_facts.of(cfg))


def _libraries(path: Path, so_files: list[Path]) -> tuple[list[tuple[str, Any]], list[str], str | None]:
    """(where, parsed metallib) for every shipped .metallib and every one embedded in a .so, the files that do
    not parse, and the minimum macOS the binaries declare."""
    from toolkit.build import metallib

    sources: list[tuple[str, Any]] = []
    errors: list[str] = []
    for lib_file in sorted(path.rglob("*.metallib")):
        try:
            sources.append((lib_file.name, metallib.parse(lib_file.read_bytes(), where=lib_file.name)))
        except metallib.MetallibError as exc:
            errors.append(f"{lib_file.name}: {exc}")
    declared = None
    for so in so_files:
        data = so.read_bytes()
        declared = declared or macho_minos(data)
        for lib in metallib.find_embedded(data, where=so.name):
            sources.append((f"{so.name}@{lib.offset}", lib))
    return sources, errors, declared


def check_metal(
    variant: str, path: Path, backend: str, so_files: list[Path], required: tuple[str, ...] = ()
) -> list[Finding]:
    """`required`: the Metal functions the metallib must hold (required_kernels of the package)."""
    if backend != "metal":
        return []
    from toolkit.build import metallib

    sources, errors, declared = _libraries(path, so_files)
    declared = declared or facts.METAL_MIN_MACOS
    f = [Finding(variant, "metallib", FAIL, e, "rebuild the metallib") for e in errors]
    if not sources:
        if not errors:
            f.append(
                Finding(
                    variant,
                    "metallib",
                    FAIL,
                    "no metallib: neither a .metallib file nor one embedded in the .so",
                    "compile the .metal sources offline and embed the metallib bytes",
                )
            )
        return f
    for where, lib in sources:
        f += [
            Finding(
                variant, "metallib", FAIL, f"{where}: {p}", f"compile with -std={facts.METAL_STD} for macOS {declared}"
            )
            for p in metallib.check(lib, required=(), min_macos=declared)
        ]
    # The binding may split kernels across libraries: a name counts if any library has it.
    have = {fn for _, lib in sources for fn in lib.function_names}
    f += _missing_kernels(variant, [n for n in required if n not in have])
    if not any(x.failed for x in f):
        libs = ", ".join(w for w, _ in sources)
        f.append(
            Finding(
                variant,
                "metallib",
                PASS,
                f"{libs}: {len(have)} functions incl. all {len(required)} dispatched; loads on macOS {declared}",
            )
        )
    return f


def _missing_kernels(variant: str, missing: list[str]) -> list[Finding]:
    if not missing:
        return []
    return [
        Finding(
            variant,
            "metallib",
            FAIL,
            f"metallib lacks {len(missing)} kernel(s) the binding dispatches: {', '.join(missing[:6])}"
            + (" ..." if len(missing) > 6 else ""),
            "compile every upstream .metal file the binding needs into the library",
        )
    ]
