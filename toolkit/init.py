"""`ggml-vendor init NAME`: scaffold one more package of the project, as `kernel-builder init` scaffolds a kernel.

plan(config, request, log) -> InitPlan   the new pyproject.toml text (tomlkit: every comment kept) and every
                                         file to create, validated by loading the new config; writes nothing
execute(plan, log) -> InitReport         creates the files (the templates directory swapped in whole), then
                                         replaces pyproject.toml atomically: a failure leaves the old state
interrupted(plan) -> Interrupted         a Ctrl-C once the plan is made: whether the package was added,
                                         read back from disk

What it writes: a [tool.ggml-vendor.packages.NAME] table (version, hub-repo, ops), templates/NAME/ (the
skeleton in toolkit/data/package-skeleton: build.toml, the torch binding, the ggml runtime shim, plus a
facts.py and one CUDA unit per op; registration.h and _ops.py are the tool's, as for every package),
variants/NAME.toml (a copy of the matrix of the package the command was given, -p, else of the one declared
first) and tests/packages/test_<module>.py (CPU checks that the package is declared and renders). The new
package is declared, rendered, built and published exactly as the others are.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit

from toolkit.core import config as config_mod
from toolkit.core import fs
from toolkit.core.config import Config
from toolkit.core.errors import ConfigError, Interrupted
from toolkit.core.interrupts import no_interrupt
from toolkit.core.package_table import KNOWN_BACKENDS, TABLE
from toolkit.core.stage import Log, quiet

SKELETON = Path(__file__).resolve().parent / "data" / "package-skeleton"
_OP_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(?:([a-z]+):)?(\S+)$")


@dataclass(frozen=True)
class Request:
    name: str
    ops: tuple[str, ...]  # "OP=PATH" (CUDA) or "OP=BACKEND:PATH", repeatable per op
    hub_repo: str | None = None  # default: the selected package's Hub owner / NAME
    version: int = 1


@dataclass(frozen=True)
class InitPlan:
    root: Path
    name: str
    pyproject: str  # the whole new pyproject.toml
    files: tuple[tuple[str, str], ...]  # (project-relative path, text), in creation order
    templates: str  # the new package's templates directory (created in one swap)

    def lines(self) -> list[str]:
        head = [f"would add [tool.{TABLE}.packages.{self.name}] to pyproject.toml"]
        return head + [f"would create {path}" for path, _ in self.files]

    def to_json(self) -> dict[str, Any]:
        return {"package": self.name, "pyproject": "pyproject.toml", "files": [p for p, _ in self.files]}


@dataclass(frozen=True)
class InitReport:
    plan: InitPlan
    written: tuple[str, ...]
    ok: bool = True
    exit_code: int = 0

    def lines(self) -> list[str]:
        return [f"wrote {p}" for p in self.written] + [
            f"package {self.plan.name} added: next `ggml-vendor sync` (vendors its closure), "
            f"`ggml-vendor render -p {self.plan.name}`"
        ]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "package": self.plan.name, "written": list(self.written)}


def _parse_ops(specs: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    if not specs:
        raise ConfigError("init needs at least one --op", "e.g. --op mul_mat_vec=src/ggml-cuda/mmvq.cu")
    ops: dict[str, dict[str, list[str]]] = {}
    for spec in specs:
        m = _OP_RE.match(spec)
        if not m:
            raise ConfigError(f"--op {spec!r} is not OP=PATH or OP=BACKEND:PATH", "e.g. --op quant=cuda:src/x.cu")
        op, backend, path = m.group(1), m.group(2) or "cuda", m.group(3)
        if backend not in KNOWN_BACKENDS:
            raise ConfigError(f"--op {spec!r}: unknown backend {backend!r}", f"use one of {', '.join(KNOWN_BACKENDS)}")
        ops.setdefault(op, {}).setdefault(backend, []).append(path)
    return ops


def _package_table(req: Request, cfg: Config, ops: dict[str, dict[str, list[str]]]) -> Any:
    owner = cfg.hub_repo.split("/", 1)[0] if "/" in cfg.hub_repo else cfg.hub_repo
    table = tomlkit.table()
    table.add(tomlkit.comment(f"Added by `ggml-vendor init {req.name}`; defaults for module, templates,"))
    table.add(tomlkit.comment("variants, backends and cuda-archs apply (docs/commands.md, init)."))
    table.add("version", req.version)
    table.add("hub-repo", req.hub_repo or f"{owner}/{req.name}")
    backends = [b for b in cfg.backends if any(b in per for per in ops.values())]
    if backends != list(cfg.backends):
        table.add("backends", backends)
    ops_table = tomlkit.table(is_super_table=True)
    for op, per_backend in ops.items():
        op_table = tomlkit.table()
        for backend, paths in per_backend.items():
            op_table.add(backend, paths)
        ops_table.add(op, op_table)
    table.add("ops", ops_table)
    return table


def _new_pyproject(cfg: Config, req: Request, ops: dict[str, dict[str, list[str]]]) -> str:
    doc = config_mod.parse_toml(cfg.root / "pyproject.toml")
    vendor_table = doc["tool"][TABLE]
    if req.name in cfg.package_names():
        raise ConfigError(f"package {req.name!r} already exists in pyproject.toml", "choose another name")
    if "packages" not in vendor_table:
        vendor_table.add("packages", tomlkit.table(is_super_table=True))
    vendor_table["packages"].add(req.name, _package_table(req, cfg, ops))
    return tomlkit.dumps(doc)


def _facts_file(name: str, ops: dict[str, dict[str, list[str]]]) -> str:
    cuda_ops = [op for op, per in ops.items() if "cuda" in per]
    units = ", ".join(f'"{op}": "{op}_kernels"' for op in cuda_ops)
    return (
        f'"""The op facts of {name}: what its templates and the tool need to know about its ops (kernel names,\n'
        "function constants, head dims, ...), read from the pinned upstream. Shared ggml facts are in\n"
        'toolkit/core/ggml_facts.py; templates see both as `facts`."""\n\n'
        "# The ops these templates implement: config naming another op for this package is refused.\n"
        f"OPS = ({', '.join(repr(op) for op in ops)},)\n"
        "# Our CUDA unit per op (csrc/cuda/<unit>.cu includes the op's upstream entry exactly once).\n"
        f"CUDA_TU_FOR_OP = {{{units}}}\n"
        "# Our own CUDA units: the ggml runtime symbols the vendored sources reference (docs/upstream.md §1.6).\n"
        'CUDA_OWN_UNITS = (("shim", "ggml_shim", "ggml_shim_cuda", False, "the ggml runtime symbols the vendored '
        'sources reference"),)\n'
        "# Regions of upstream code the binding depends on, fingerprinted by sync (Fingerprint from\n"
        "# toolkit.core.ggml_facts), and the functions the ops' semantics live in (Behaviour).\n"
        "FINGERPRINTS: tuple = ()\nBEHAVIOUR: tuple = ()\n"
        "# The conformance cases `verify` runs on a built variant: a module beside this file whose run_all(mod)\n"
        "# returns what toolkit/verify/conformance.py describes (templates/gguf-kernels/conformance.py is one).\n"
        "# Until it names one, the gate says 'not run (the package declares no conformance cases ...)'.\n"
        '# CONFORMANCE = "conformance.py"\n'
    )


def _unit_template(op: str) -> str:
    return (
        "// {{ notice }}\n//\n"
        f'// {{{{ cuda_units["{op}"].comment }}}}. Define here the extern "C" launcher(s) that the torch binding\n'
        "// calls; the upstream kernels and host helpers are visible through the include.\n\n"
        f'#include "{{{{ cuda_units["{op}"].include }}}}"\n'
    )


def _test_file(name: str, module: str, ops: tuple[str, ...]) -> str:
    return f'''"""{name}: declared in pyproject.toml with its ops, and its templates render (CPU; from `ggml-vendor init`)."""

from __future__ import annotations

from pathlib import Path

from toolkit import render
from toolkit.core import config

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "{name}"
OPS = {list(ops)!r}


def test_{module}_is_declared_with_its_ops() -> None:
    cfg = config.load(ROOT).for_package(PACKAGE)
    assert [op.name for op in cfg.ops] == OPS


def test_{module}_renders_every_op() -> None:
    cfg = config.load(ROOT).for_package(PACKAGE)
    files = render.plan(cfg).by_path()
    assert "build.toml" in files and f"torch-ext/{{cfg.module}}/__init__.py" in files
    for op in OPS:
        assert op in files["torch-ext/torch_binding.cpp"].content
'''


def _check_targets(root: Path, templates: str, paths: list[str]) -> None:
    """Nothing there yet (a dangling link counts as there), and every file lands inside the project: a directory
    on the way that is a symbolic link out of it is refused."""
    base = root.resolve()
    for path in [templates, *paths]:
        if os.path.lexists(root / path):
            raise ConfigError(f"{path} already exists", "remove it, or pick another package name")
        if not (root / path).resolve().is_relative_to(base):
            raise ConfigError(
                f"{path} resolves to {(root / path).resolve()}, outside the project (a symbolic link on the way)",
                "replace the link with a directory inside the project",
            )


def plan(cfg: Config, request: Request, log: Log = quiet) -> InitPlan:
    """The new pyproject.toml and every file of the package, validated by loading the new config from a
    scratch copy; reads only."""
    ops = _parse_ops(request.ops)
    text = _new_pyproject(cfg, request, ops)
    # Every config rule (names, paths in this project, repo ids), before anything is written; the new package's
    # facts.py is among the files to write, so no facts file is read.
    table = tomlkit.parse(text).unwrap()["tool"][TABLE]
    pkg = config_mod.from_table(cfg.root, table, facts=False).for_package(request.name).package
    log(f"package {pkg.name}: module {pkg.module}, templates {pkg.templates}, source {pkg.source}")
    files: list[tuple[str, str]] = []
    for src in sorted(p for p in SKELETON.rglob("*") if p.is_file()):
        files.append((f"{pkg.templates}/{src.relative_to(SKELETON).as_posix()}", src.read_text(encoding="utf-8")))
    files.append((f"{pkg.templates}/facts.py", _facts_file(pkg.name, ops)))
    files += [(f"{pkg.templates}/csrc/cuda/{op}_kernels.cu.j2", _unit_template(op)) for op in ops if "cuda" in ops[op]]
    variants = cfg.variants_file
    if variants.is_file():
        files.append((pkg.variants, variants.read_text(encoding="utf-8")))
    files.append((f"tests/packages/test_{pkg.module}.py", _test_file(pkg.name, pkg.module, tuple(ops))))
    _check_targets(cfg.root, pkg.templates, [path for path, _ in files])
    return InitPlan(cfg.root, pkg.name, text, tuple(files), pkg.templates)


def execute(init_plan: InitPlan, log: Log = quiet) -> InitReport:
    """Create the templates directory in one rename, the other files beside it, then pyproject.toml."""
    root = init_plan.root
    staged = Path(tempfile.mkdtemp(prefix=".ggml-vendor-init-", dir=root))
    written: list[str] = []
    try:
        inside = [(p, t) for p, t in init_plan.files if p.startswith(init_plan.templates + "/")]
        for path, text in inside:
            target = staged / path[len(init_plan.templates) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        (root / init_plan.templates).parent.mkdir(parents=True, exist_ok=True)
        os.rename(staged, root / init_plan.templates)
        written += [p for p, _ in inside]
        for path, text in init_plan.files:
            if path not in written:
                fs.atomic_write(root / path, text.encode("utf-8"))
                written.append(path)
        fs.atomic_write(root / "pyproject.toml", init_plan.pyproject.encode("utf-8"))
    except BaseException:
        with no_interrupt():  # a second Ctrl-C does not leave the roll-back half done
            _roll_back(init_plan, staged, written)
        raise
    log(f"added package {init_plan.name}")
    return InitReport(init_plan, (*written, "pyproject.toml"))


def _roll_back(init_plan: InitPlan, staged: Path, written: list[str]) -> None:
    """Back to the old state: nothing of the package stays half written. Once pyproject.toml declares the
    package (its replacement is the last step, and atomic), the package is added and its files stay."""
    root = init_plan.root
    shutil.rmtree(staged, ignore_errors=True)
    if _pyproject_is_new(init_plan):
        return
    for path in reversed(written):
        (root / path).unlink(missing_ok=True)
    if (root / init_plan.templates).is_dir() and any(p.startswith(init_plan.templates + "/") for p in written):
        shutil.rmtree(root / init_plan.templates, ignore_errors=True)


def _pyproject_is_new(init_plan: InitPlan) -> bool:
    try:
        return (init_plan.root / "pyproject.toml").read_text(encoding="utf-8") == init_plan.pyproject
    except OSError:
        return False


def _files_as_planned(init_plan: InitPlan) -> tuple[list[str], list[str]]:
    """The package's files on disk: (those with the planned text, those present with other text)."""
    same: list[str] = []
    other: list[str] = []
    for path, text in init_plan.files:
        target = init_plan.root / path
        if not os.path.lexists(target):
            continue
        try:
            (same if target.read_text(encoding="utf-8") == text else other).append(path)
        except (OSError, UnicodeDecodeError):
            other.append(path)
    return same, other


def interrupted(init_plan: InitPlan) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C once `init_plan` was made, the report's printing included:
    whether pyproject.toml declares the package and which of its files are there, read back from disk."""
    name, files = init_plan.name, init_plan.files
    same, other = _files_as_planned(init_plan)
    if _pyproject_is_new(init_plan):
        if len(same) == len(files):
            return Interrupted(
                f"package {name} was added: pyproject.toml declares it and its {len(files)} file(s) are written "
                "(read back from disk)",
                f"nothing to undo; next `ggml-vendor sync`, then `ggml-vendor render -p {name}`",
            )
        missing = [p for p, _ in files if p not in same]
        return Interrupted(
            f"pyproject.toml declares package {name}, but {len(missing)} of its files are missing or changed: "
            f"{', '.join(missing[:3])}" + (" …" if len(missing) > 3 else "") + " (read back from disk)",
            f"restore them, or remove the [tool.{TABLE}.packages.{name}] table and run `ggml-vendor init` again",
        )
    left = same + other
    if not left:
        return Interrupted(
            f"package {name} was not added: pyproject.toml is as it was and none of its files were left "
            "(read back from disk)",
            "run the init again",
        )
    return Interrupted(
        f"package {name} was not added (pyproject.toml is as it was), but {', '.join(left[:3])}"
        + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        + " of its files remain (read back from disk)",
        "remove them, then run the init again",
    )
