"""The host toolchain a build plans with (`--toolchain`): the pinned hermetic zig (provisioned when missing,
with its cross toolchains) or the system compiler. Pure: a missing zig is a planned install, the wrapper
dirs are computed here and written by execute (zig.materialize)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from toolkit.build.envs import HostFacts
from toolkit.build.provision import Install
from toolkit.build.zig import ZigToolchain
from toolkit.core.errors import BuildError, ConfigError

TOOLCHAINS = ("auto", "zig", "system")


@dataclass(frozen=True)
class HostToolchain:
    """The C++ compiler/linker for bindings and links (and nvcc's host compiler) on this host."""

    kind: str  # zig | system
    cxx: str | None
    cxx_id: str  # identity hashed into every step's cache key
    ccbin: str | None = None  # nvcc -ccbin (None: nvcc's default host compiler)
    info: dict[str, str] = field(default_factory=dict)  # exact versions, for each variant's provenance
    note: str = ""
    cross: dict[str, tuple[str, str, str, dict[str, str]]] = field(
        default_factory=dict
    )  # cpu -> (cxx, cxx_id, ccbin, info) of the zig cross toolchains
    wrappers: tuple[ZigToolchain, ...] = ()  # zig wrapper dirs execute writes (plan_toolchain computed them)
    install: Install | None = None  # zig itself, when it is to be provisioned first


def _system_toolchain(host: HostFacts) -> HostToolchain:
    return HostToolchain(
        "system", host.cxx, host.cxx_version, None, {"kind": "system", "cxx": host.cxx_version or str(host.cxx)}
    )


def _zig_to_provision(install: Install) -> HostToolchain:
    from toolkit.build import zig as z

    sym = f"<zig {z.ZIG_VERSION} clang++ wrapper>"
    return HostToolchain(
        "zig",
        sym,
        f"zig {z.ZIG_VERSION} (to be provisioned)",
        sym,
        {"kind": "zig", "zig": z.ZIG_VERSION},
        f"zig {z.ZIG_VERSION} is not installed yet: the build provisions it ({z.ZIG_PACKAGE} from PyPI)",
        install=install,
    )


def resolve_toolchain(choice: str, host: HostFacts, *, provision_ok: bool = False) -> HostToolchain:
    """--toolchain: `zig` = the pinned hermetic zig (provisioned when missing), `system` = CXX or g++,
    `auto` = zig for Linux when it is installed (or when provisioning is on), else the system compiler.
    Pure: a missing zig is a planned install, the wrapper dirs are computed, not written."""
    if choice not in TOOLCHAINS:
        raise ConfigError(f"--toolchain {choice!r} is not one of {', '.join(TOOLCHAINS)}", "use zig, system or auto")
    if host.os != "linux" or choice == "system":
        return _system_toolchain(host)
    from toolkit.build import zig as z

    found = z.find_zig()
    if found is None and choice == "auto" and not provision_ok:
        return replace(
            _system_toolchain(host),
            note=f"hermetic toolchain (zig {z.ZIG_VERSION}) not installed: building with the system compiler "
            f"({host.cxx_version or host.cxx}); `--provision` or `pip install {z.ZIG_PACKAGE}=={z.ZIG_VERSION}` "
            "makes manylinux_2_28-clean builds on any host",
        )
    if found is None:
        return _zig_to_provision(z.zig_install())
    tc = z.plan_toolchain(found, host.cpu)
    if tc.version != z.ZIG_VERSION:
        raise BuildError(
            f"zig at {found} is version {tc.version}, not the pinned {z.ZIG_VERSION}",
            f"point GGML_VENDOR_ZIG at a ziglang {z.ZIG_VERSION} tree, or unset it",
        )
    cross, wrappers = {}, [tc]
    for cpu in host.cross_cpus:
        std = z.cross_libstdcxx(cpu)
        if std is not None:
            xt = z.plan_toolchain(found, cpu, std=std)
            cross[cpu] = (xt.cxx, xt.identity, xt.cxx, xt.provenance())
            wrappers.append(xt)
    return HostToolchain("zig", tc.cxx, tc.identity, tc.cxx, tc.provenance(), cross=cross, wrappers=tuple(wrappers))
