"""What "stable ABI" means, read from the binary: a torch-stable-abi variant's shared objects import no torch C++ symbol.

A stable-ABI build (docs/stable-abi.md) may import torch's C shim (`aoti_torch_*`, `torch_*`: plain C functions that
every torch from the floor on exports) and the C++ runtime, and nothing else of torch: no mangled name in the
`c10::`, `at::` or `torch::` namespaces (those change with each torch minor) except `torch::stable::` and
`torch::headeronly::` (the stable API's own), no libtorch_python symbol and no libtorch_python.so dependency. A
variant that breaks this is refused, naming the first offending symbol.

Demangling is not needed to decide: in an Itanium-mangled name a namespace appears as its length and name
(`3c10`, `2at`, `5torch`), never directly after another digit, so the check reads the mangled text.
"""

from __future__ import annotations

import re
from pathlib import Path

from toolkit.verify.findings import FAIL, PASS, Finding

STABLE_PREFIX = "torch-stable-abi"
# A torch C++ namespace in a mangled name: `3c10`, `2at` or `5torch`, not preceded by a digit (which would make it
# part of a longer length, e.g. `12atomic`), and followed by the next name component (a length or a special).
_TORCH_NS = re.compile(r"(?<![0-9])(3c10|2at|5torch)(?=[0-9A-Z_])")
_ALLOWED_TORCH = ("5torch6stable", "5torch10headeronly")  # the stable API's own C++ (header-only in practice)
_PYTHON_BINDINGS = re.compile(r"THP[A-Z]|8pybind11|5torch6python|5torch8autograd6python")
TORCH_PYTHON_LIB = "libtorch_python"


def is_stable_variant(name: str) -> bool:
    return name.startswith(STABLE_PREFIX)


def dynamic_imports(so: Path) -> tuple[list[str], list[str]]:
    """(the undefined dynamic symbols, the DT_NEEDED libraries) of an ELF shared object."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    with so.open("rb") as fh:
        elf = ELFFile(fh)
        dynsym = elf.get_section_by_name(".dynsym")
        if not isinstance(dynsym, SymbolTableSection):
            dynsym = None
        names = (
            [] if dynsym is None else [s.name for s in dynsym.iter_symbols() if s.name and s["st_shndx"] == "SHN_UNDEF"]
        )
        needed = [
            str(getattr(tag, "needed", ""))
            for sec in elf.iter_sections()
            if isinstance(sec, DynamicSection)
            for tag in sec.iter_tags()
            if tag.entry.d_tag == "DT_NEEDED"
        ]
    return names, needed


def offending_import(name: str) -> str | None:
    """Why an imported symbol ties the binary to one torch minor, or None when it does not."""
    if not name.startswith("_Z"):
        return None  # C symbols: the aoti_torch_* / torch_* shim, libc, Python's limited API
    if _PYTHON_BINDINGS.search(name):
        return "a libtorch_python symbol"
    for m in _TORCH_NS.finditer(name):
        if not name.startswith(_ALLOWED_TORCH, m.start()):
            return {"3c10": "a c10:: C++ symbol", "2at": "an at:: C++ symbol"}.get(m[1], "a torch:: C++ symbol")
    return None


def check_stable_abi(variant: str, so_files: list[Path]) -> list[Finding]:
    """For a torch-stable-abi variant: PASS when no binary imports torch C++ or libtorch_python, else one FAIL per
    binary naming its first offending symbol. Other variants: nothing to check."""
    if not is_stable_variant(variant):
        return []
    findings: list[Finding] = []
    for so in so_files:
        try:
            names, needed = dynamic_imports(so)
        except Exception as exc:  # pyelftools raises several error types on a damaged file
            findings.append(Finding(variant, "stable-abi", FAIL, f"{so.name}: not a readable ELF ({exc})"))
            continue
        lib = next((n for n in needed if n.startswith(TORCH_PYTHON_LIB)), None)
        if lib is not None:
            findings.append(
                Finding(
                    variant,
                    "stable-abi",
                    FAIL,
                    f"{so.name} links {lib}: a stable-ABI build must not depend on torch's Python bindings",
                    "drop the link to libtorch_python (the stable API needs only libtorch)",
                )
            )
            continue
        bad = [(n, why) for n in names if (why := offending_import(n)) is not None]
        if bad:
            first, why = bad[0]
            more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
            findings.append(
                Finding(
                    variant,
                    "stable-abi",
                    FAIL,
                    f"{so.name} imports {why}, {first}{more}: it loads only into the torch it was built with",
                    "use torch's stable API (torch/csrc/stable, the aoti_torch_* shim) for it, or build a per-torch variant",
                    tuple(n for n, _ in bad),
                )
            )
    if not findings:
        findings.append(
            Finding(
                variant,
                "stable-abi",
                PASS,
                f"{len(so_files)} binaries import torch only through its stable C shim (no c10/at/torch C++, "
                "no libtorch_python)",
            )
        )
    return findings
