"""The nix executor: where `nix` exists, hand the whole matrix to kernel-builder (docs/hub-contract.md §7)
instead of compiling ourselves.

It renders what kernel-builder needs next to our rendered tree — a flake.nix whose outputs come from
`kernel-builder.lib.genKernelFlakeOutputs` — in a staging copy of the project, runs
`nix run .#build-and-copy`, and moves each produced variant into build/ with the same atomic swap as the
local executor. kernel-builder writes metadata.json, the digest and provenance itself.

Every package gets its own flake, over its own rendered source tree, build/<name>/src/: that tree reaches the
project's vendor/ as ../../../vendor, so its staging copy is laid out as a kernel source tree of its own (vendor/
beside build.toml, the build.toml's paths to it rewritten), which is what kernel-builder reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.build.outdir import variant_stage
from toolkit.build.results import VariantResult
from toolkit.core import build_edition, fs
from toolkit.core.errors import BuildError

if TYPE_CHECKING:
    from toolkit.build.envs import HostFacts
    from toolkit.build.steps import BuildPlan, VariantPlan

KERNEL_BUILDER_FLAKE = "github:huggingface/kernels"
# What kernel-builder reads from a kernel source tree (everything else stays out of the nix store copy).
COPIED = ("build.toml", "torch-ext", "csrc", "vendor/ggml", "vendor/UPSTREAM")
VENDOR = "vendor"

FLAKE_TEMPLATE = """\
{{
  description = "{name}: ggml kernels vendored by ggml-vendor";

  nixConfig = {{
    extra-substituters = [ "https://huggingface.cachix.org" ];
    extra-trusted-public-keys = [
      "huggingface.cachix.org-1:ynTPbLS0W8ofXd9fDjk1KvoFky9K2jhxe6r4nXAkc/o="
    ];
  }};

  inputs = {{
    kernel-builder.url = "{builder}";
  }};

  outputs = {{ self, kernel-builder }}:
    kernel-builder.lib.genKernelFlakeOutputs {{
      inherit self;
      path = ./.;
    }};
}}
"""


def render_flake(name: str, builder: str = KERNEL_BUILDER_FLAKE) -> str:
    return FLAKE_TEMPLATE.format(name=name, builder=builder)


@dataclass(frozen=True)
class NixPlan:
    flake: str
    command: tuple[str, ...]
    copied: tuple[str, ...]  # destinations in the staged tree (COPIED)
    vendor: str = VENDOR  # where the package's tree finds vendor/ ("../../../vendor" from build/<name>/src)

    def source(self, rel: str) -> str:
        """Where a staged path comes from, relative to the package's rendered tree."""
        if rel == VENDOR or rel.startswith(VENDOR + "/"):
            return self.vendor + rel[len(VENDOR) :]
        return rel


def vendor_of(root: Path) -> str:
    """vendor/ relative to a package's rendered tree: the project's, found upwards from it."""
    from toolkit.core.config import find_root
    from toolkit.core.errors import ConfigError

    try:
        project = find_root(root)
    except ConfigError:  # a tree outside any project (a test's): its own vendor/
        return VENDOR
    return Path(os.path.relpath(project / VENDOR, root)).as_posix()


def plan_nix(plan: BuildPlan, nix: str, jobs: int, variants: tuple[VariantPlan, ...]) -> NixPlan:
    cmd = (nix, "run", ".#build-and-copy", "-L", "--max-jobs", str(jobs))
    return NixPlan(render_flake(plan.project.name), cmd, COPIED, vendor_of(plan.project.root))


class NixExecutor:
    def __init__(self, plan: BuildPlan, host: HostFacts, jobs: int = 2, log_dir: Path | None = None) -> None:
        if host.nix is None:  # judging makes a variant nix-built only where nix was found
            raise BuildError(
                "internal: a variant is planned for nix on a host without nix", "report this as a ggml-vendor bug"
            )
        self.plan = plan
        self.nix: str = host.nix
        self.jobs = jobs
        self.log_dir = log_dir or plan.project.project_root / ".cache" / "build" / "logs"

    def run(self, variants: tuple[VariantPlan, ...]) -> list[VariantResult]:
        root = self.plan.project.root
        np_ = plan_nix(self.plan, self.nix, self.jobs, variants)
        t0 = time.monotonic()
        with fs.scratch(root, ".nix-stage-") as stage:
            _stage_project(root, stage, np_)
            try:
                proc = subprocess.run(list(np_.command), cwd=stage, capture_output=True, text=True)
            except OSError as exc:
                proc = subprocess.CompletedProcess(np_.command, 127, "", f"cannot run {self.nix}: {exc}")
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = self.log_dir / "nix-build-and-copy.log"
            log.write_text(f"$ cd <staged project> && {' '.join(np_.command)}\n{proc.stdout}{proc.stderr}")
            return [self._result(v, stage, proc, np_, log, t0) for v in variants]

    def _result(
        self, v: VariantPlan, stage: Path, proc: subprocess.CompletedProcess[str], np_: NixPlan, log: Path, t0: float
    ) -> VariantResult:
        """Swap what nix produced for `v` into build/, or say why it failed."""
        produced = stage / "build" / v.name
        seconds = time.monotonic() - t0
        if proc.returncode == 0 and produced.is_dir():
            # build/<package>/<variant>
            with variant_stage(self.plan.project.project_root / v.out_dir) as tmp_final:
                shutil.copytree(produced, tmp_final, dirs_exist_ok=True)
            return VariantResult(
                v.name, "built", "via nix (kernel-builder)", v.out_dir, v.ops_id, v.archs, seconds, log=str(log)
            )
        step = " ".join(["nix", *np_.command[1:]])
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
        why = f"exited with status {proc.returncode}" if proc.returncode else f"produced no build/{v.name}"
        return VariantResult(
            v.name,
            "failed",
            f"{step}: {why}",
            v.out_dir,
            v.ops_id,
            v.archs,
            seconds,
            log=str(log),
            failed_step=step,
            tail=tail or "(no output)",
        )


def _stage_project(root: Path, stage: Path, np_: NixPlan) -> None:
    """The files kernel-builder reads, copied into `stage` with the flake, as a git repository (flakes
    only see files tracked by git). vendor/ lands beside build.toml, whose paths to it say so."""
    for rel in np_.copied:
        src = root / np_.source(rel)
        if src.is_dir():
            shutil.copytree(src, stage / rel)
        elif src.is_file():
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, stage / rel)
    build_toml = stage / "build.toml"
    if build_toml.is_file():
        text = build_toml.read_text()
        if np_.vendor != VENDOR:
            text = text.replace(f'"{np_.vendor}/', f'"{VENDOR}/')
        # kernel-builder's Nix builder requires edition 6; the committed file keeps the edition that the
        # packages' oldest supported kernels client reads (toolkit/core/build_edition.py).
        build_toml.write_text(build_edition.to_edition(text, build_edition.NIX_EDITION))
    (stage / "flake.nix").write_text(np_.flake)
    subprocess.run(["git", "init", "-q"], cwd=stage, check=False)
    subprocess.run(["git", "add", "-A"], cwd=stage, check=False)
