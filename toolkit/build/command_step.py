"""One command of a backend's toolchain plan (Metal, ROCm): what runs, from which files, into which."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One command. `argv[0]` is the program; paths are absolute."""

    name: str
    argv: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "argv": list(self.argv), "inputs": list(self.inputs), "outputs": list(self.outputs)}
