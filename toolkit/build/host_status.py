"""Each variant's status on this host: can it be built here, how, and if not exactly what is missing.

Pure: `status` judges a variant against `HostFacts` that the caller detected (toolkit.build.envs.detect_host),
so every rule here is unit-testable without nvcc, hipcc, Xcode or a second torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolkit.build.matrix import BACKENDS_WITH_TOOLKIT, DEFAULT_INDEX, Source, Variant, minor_key

if TYPE_CHECKING:
    from toolkit.build.envs import HostFacts, Toolkit
    from toolkit.build.torchenvs import TorchEnv


@dataclass(frozen=True)
class Status:
    """Whether a variant can be built here and how; when not, `reason` says exactly what is missing."""

    buildable: bool
    reason: str  # "" when buildable by the local executor
    executor: str | None = None  # "local" | "nix" | None
    toolkit: Toolkit | None = None
    env: TorchEnv | None = None
    # Not buildable yet, but only for want of these, which the matrix's [sources] provide: `build --all`
    # (or --provision) installs them into the user cache and the variant becomes buildable here.
    provision: tuple[tuple[str, Source], ...] = ()  # ("torch" | "toolkit", source)

    @property
    def label(self) -> str:
        if self.provision:
            return "provisionable (local)"
        return f"buildable ({self.executor})" if self.buildable else "skipped"


def pick_toolkit(variant: Variant, toolkits: tuple[Toolkit, ...]) -> Toolkit | None:
    """The toolkit that builds `variant`: same backend and major; the exact minor if present, else the
    newest older minor of that major (its binaries run on the variant's newer runtime; a newer minor's
    would not run on the older one)."""
    want_major, want_minor = (int(x) for x in (variant.toolkit or "0.0").split("."))
    usable = [t for t in toolkits if t.backend == variant.backend and t.major == want_major and t.minor <= want_minor]
    return max(usable, key=lambda t: t.minor, default=None)


def pick_env(variant: Variant, envs: tuple[TorchEnv, ...], host_cpu: str | None = None) -> TorchEnv | None:
    """The torch environment whose headers compile the variant: its exact minor, or for a stable-ABI variant the
    newest torch from its floor on (TORCH_TARGET_VERSION keeps the binary to the floor's API)."""
    fits = []
    for env in envs:
        cpu = env.cpu or host_cpu or variant.cpu
        if env.compute != variant.compute or cpu != variant.cpu:
            continue
        if env.torch_minor == variant.torch and not variant.stable:
            return env
        if variant.stable and minor_key(env.torch_minor) >= minor_key(variant.torch):
            fits.append(env)
    return max(fits, key=lambda e: minor_key(e.torch_minor), default=None)


ENGINES = ("auto", "local", "nix")


@dataclass
class _Judging:
    """One variant being judged: what it needs from the host and what [sources] would provision."""

    variant: Variant
    host: HostFacts
    index: str
    torch_source: Source | None
    toolkit_source: Source | None
    blocked: Callable[[Source], str] | None
    provision: list[tuple[str, Source]] = field(default_factory=list)

    @property
    def cross(self) -> bool:
        return self.variant.cpu != self.host.cpu

    def can_provision(self, kind: str, src: Source | None) -> str | None:
        """None when `src` is planned for provisioning; else why not ("" when there is no source)."""
        if src is None:
            return ""
        why = self.blocked(src) if self.blocked else ""
        if why:
            return why
        self.provision.append((kind, src))
        return None


def status(
    variant: Variant,
    host: HostFacts,
    *,
    enabled_backends: tuple[str, ...],
    index: str | None,
    engine: str = "auto",
    torch_source: Source | None = None,
    toolkit_source: Source | None = None,
    blocked: Callable[[Source], str] | None = None,
) -> Status:
    """Judge one variant against the host. Order matters: the first unmet need is the one reported.

    `engine`: "local" and "auto" compile here with the local toolchains (auto also provisions what is
    missing, see toolkit.build.provision); "nix" hands every variant of the host's system to kernel-builder
    (the caller has checked that nix is usable: toolkit.build.envs.probe_nix). `torch_source` /
    `toolkit_source` say where a missing torch build / toolkit would come from (the matrix's [sources]);
    `blocked(source)` says why this machine's pip may not install it (e.g. a configured constraint)."""
    if variant.backend not in enabled_backends:
        return Status(
            False,
            f"backend {variant.backend} is not enabled ([tool.ggml-vendor].backends and "
            f"build.toml general.backends enable: {', '.join(enabled_backends) or 'none'})",
        )
    if engine == "nix":
        return _nix_status(variant, host)
    j = _Judging(variant, host, index or DEFAULT_INDEX, torch_source, toolkit_source, blocked)
    refused = _host_refusal(j)
    if refused is not None:
        return refused
    toolkit = _toolkit_for(j)
    if isinstance(toolkit, Status):
        return toolkit
    env = pick_env(variant, host.envs, host.cpu)
    if env is None:
        missing = _torch_refusal(j)
        if missing is not None:
            return missing
    if j.provision:
        return _provisionable(j, toolkit, env)
    return Status(True, "", "local", toolkit, env)


def _nix_status(variant: Variant, host: HostFacts) -> Status:
    # kernel-builder's Nix builds every variant of the host's system (docs/hub-contract.md §7).
    if host.nix and variant.system == host.system:
        return Status(True, "", "nix")
    if not host.nix:
        return Status(False, "--engine nix: no `nix` on PATH")
    return Status(False, f"--engine nix builds {host.system} variants only (this variant is {variant.system})")


def _host_refusal(j: _Judging) -> Status | None:
    """Why this host's OS/CPU cannot build the variant at all (None: it can, perhaps cross-building)."""
    variant, host = j.variant, j.host
    if variant.os == "darwin" and host.os != "darwin":
        return Status(
            False, f"needs macOS on Apple silicon with Xcode 26 and the Metal toolchain (this host is {host.system})"
        )
    if variant.os != host.os:
        return Status(False, f"needs a {variant.os} host (this host is {host.system})")
    if j.cross and not (variant.backend == "cuda" and variant.cpu in host.cross_cpus):
        how = (
            ""
            if variant.backend != "cuda"
            else f"; cross-building needs zig and the {variant.cpu} libstdc++ "
            f"(Debian/Ubuntu: libstdc++-12-dev-{'arm64' if variant.cpu == 'aarch64' else variant.cpu}-cross)"
        )
        return Status(False, f"needs an {variant.cpu} host (this host is {host.cpu}){how}")
    if variant.backend == "metal" and not host.metal:
        return Status(False, "needs the Metal toolchain (`xcodebuild -downloadComponent MetalToolchain`)")
    return None


def _toolkit_for(j: _Judging) -> Toolkit | Status | None:
    """The GPU toolkit that compiles the variant (None: none needed or one is planned for provisioning; a
    Status: what is missing), with the target CPU's libcudart for a cross build."""
    variant, host = j.variant, j.host
    if variant.backend not in BACKENDS_WITH_TOOLKIT:
        return None
    # a cross build needs a toolkit whose headers serve the target CPU (PyPI's flat one, not the system's)
    toolkit = pick_toolkit(variant, tuple(t for t in host.toolkits if t.targets(variant.cpu)))
    if toolkit is None:
        why = j.can_provision("toolkit", j.toolkit_source)
        if why is not None:
            return Status(False, _toolkit_need(j) + (f"; {why}" if why else ""))
    if j.cross and variant.backend == "cuda":
        return _with_cudart(j, toolkit)
    return toolkit


def _toolkit_need(j: _Judging) -> str:
    variant, host = j.variant, j.host
    found = ", ".join(f"{t.backend} {t.version}" for t in host.toolkits) or "none"
    if variant.backend != "cuda":
        return f"needs ROCm {variant.toolkit} (hipcc); found: {found}"
    major = (variant.toolkit or "").split(".")[0]
    need = f"needs a CUDA toolkit {major}.0-{variant.toolkit} (nvcc) for {variant.compute}"
    if j.cross and pick_toolkit(variant, host.toolkits) is not None:
        need += f" whose headers serve {variant.cpu} (a system toolkit's are x86_64-only)"
    return f"{need}; found: {found}"


def _with_cudart(j: _Judging, toolkit: Toolkit | None) -> Toolkit | Status | None:
    """The host's nvcc compiles; the link needs the target CPU's libcudart (provisioned from PyPI)."""
    variant, host = j.variant, j.host
    cudart = host.cudart.get(f"{variant.cpu}-{variant.toolkit}") or (
        host.cudart.get(f"{variant.cpu}-{toolkit.version}") if toolkit else None
    )
    if cudart and toolkit is not None:
        from dataclasses import replace

        return replace(toolkit, cudart_dir=cudart)
    if not cudart:
        why = j.can_provision("cudart", j.toolkit_source)
        if why is not None:
            return Status(False, f"needs libcudart {variant.toolkit} for {variant.cpu}" + (f"; {why}" if why else ""))
    return toolkit


def _torch_refusal(j: _Judging) -> Status | None:
    """No torch environment for the variant: planned for provisioning (None), or what is missing."""
    variant, host, index = j.variant, j.host, j.index
    why = j.can_provision("torch", j.torch_source)
    if why is None:
        return None
    what = {"cuda": f"for CUDA {variant.toolkit}", "rocm": f"for ROCm {variant.toolkit}"}.get(
        variant.backend, f"({variant.backend})"
    )
    if why:
        return Status(False, f"needs torch {variant.torch} {what}: {why}")
    if index.startswith("the PyTorch wheel index"):
        return Status(False, f"needs torch {variant.torch} {what}, which is not on PyPI: from {index}")
    have = ", ".join(f"{e.version}" for e in host.envs) or "none"
    return Status(
        False,
        f"needs torch {variant.torch} {what} from {index} (torch environments here: {have}; `--create-envs` makes one)",
    )


def _provisionable(j: _Judging, toolkit: Toolkit | None, env: TorchEnv | None) -> Status:
    variant = j.variant
    arch = f", {variant.cpu}" if j.cross else ""
    what = " + ".join(
        f"torch {src.version} ({variant.compute}{arch})"
        if kind == "torch"
        else (f"libcudart {src.version} ({variant.cpu})" if kind == "cudart" else f"{src.name} {src.version}")
        for kind, src in j.provision
    )
    return Status(
        False,
        f"provisioned on demand: {what} from {' / '.join(sorted({s.where for _, s in j.provision}))} "
        "(`build --all` or `--provision` installs it into the user cache)",
        "local",
        toolkit,
        env,
        tuple(j.provision),
    )
