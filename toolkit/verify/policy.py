"""The manylinux_2_28 policy verify holds binaries to, as auditwheel publishes it (its manylinux-policy.json):
the symbol versions of each system-library family a glibc 2.28 distribution provides, per CPU, and the system
libraries a wheel may leave to the host (the whitelist).

auditwheel's policy is stricter than "what AlmaLinux 8 ships": its libstdc++ has GLIBCXX_3.4.25, but the policy
stops at GLIBCXX_3.4.24 because other glibc-2.28 distributions lack 3.4.25 (pypa/auditwheel#523), and
kernel-abi-check, the Hub's own gate, refuses 3.4.25 as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

POLICY = "manylinux_2_28"
# The families whose ceilings the findings spell out (the others are checked all the same).
SHOWN_FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC")


def _numeric(text: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        return None


@dataclass(frozen=True)
class Manylinux:
    """One manylinux policy for one CPU: allowed versions per family ("GLIBC" -> {"2.2.5", ..., "2.28"})."""

    name: str  # "manylinux_2_28_x86_64"
    symbol_versions: dict[str, frozenset[str]]
    whitelist: frozenset[str]  # sonames a wheel may import from the system: libc.so.6, libstdc++.so.6, ...

    def ceiling(self, family: str) -> tuple[int, ...] | None:
        numbers = [n for n in map(_numeric, self.symbol_versions.get(family, ())) if n is not None]
        return max(numbers) if numbers else None

    def ceiling_text(self, family: str) -> str:
        top = self.ceiling(family)
        return ".".join(map(str, top)) if top else "none"

    def summary(self) -> str:
        """'GLIBC 2.28, GLIBCXX 3.4.24, ...' for the pass finding."""
        return ", ".join(f"{f} {self.ceiling_text(f)}" for f in SHOWN_FAMILIES if f in self.symbol_versions)

    def too_new(self, version: str) -> str | None:
        """Why a symbol version is beyond this policy, or None when it is within (or not a system family's)."""
        family, _, number = version.partition("_")
        allowed = self.symbol_versions.get(family)
        if allowed is None or number in allowed:
            return None
        if version == "GLIBC_PRIVATE":
            return "glibc-internal, changes with every glibc release"
        if version == "GLIBC_ABI_DT_RELR":
            return "packed relative relocations: glibc >= 2.36 (linked with -z pack-relative-relocs)"
        got, top = _numeric(number), self.ceiling(family)
        if got is None or top is None:
            return f"not a {family} version of {POLICY}"
        if got > top:
            return f"{version} > {family}_{self.ceiling_text(family)}"
        return f"{version} is not among {POLICY}'s {family} versions"


@lru_cache(maxsize=8)
def manylinux(cpu: str = "x86_64") -> Manylinux | None:
    """auditwheel's manylinux_2_28 policy for `cpu` ("x86_64", "aarch64", ...); None for a CPU it has none for."""
    from auditwheel.architecture import Architecture
    from auditwheel.libc import Libc
    from auditwheel.policy import WheelPolicies

    try:
        arch = Architecture(cpu)
    except ValueError:
        return None
    policy = WheelPolicies(libc=Libc.GLIBC, arch=arch).get_policy_by_name(f"{POLICY}_{arch.baseline.value}")
    if policy is None:
        return None
    return Manylinux(policy.name, dict(policy.symbol_versions), frozenset(policy.whitelist))


def version_too_new(version: str, cpu: str = "x86_64") -> str | None:
    """Why `version` (e.g. "GLIBC_2.34") is beyond manylinux_2_28 on `cpu`, or None when it is within."""
    policy = manylinux(cpu)
    return None if policy is None else policy.too_new(version)
