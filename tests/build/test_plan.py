"""The build plan, cache keys and metadata, without a compiler: hosts and torch environments are constructed,
the project is the miniature kernel package under tests/fixtures/build_kernel (copied per test)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers import BUILD_KERNEL_SRC, built_variants, copy_build_kernel
from toolkit.build.cache import BuildCache, parse_depfile
from toolkit.build.capabilities import gencode_flags, sort_archs, supported_capabilities
from toolkit.build.envs import HostFacts, Toolkit
from toolkit.build.inputs import KernelSection, load_project, read_provenance
from toolkit.build.local import LocalExecutor, variant_intact
from toolkit.build.matrix import parse_name
from toolkit.build.stage import judge
from toolkit.build.stepcontext import Step
from toolkit.build.steps import BuildPlan, make_plan
from toolkit.build.torchenvs import TorchEnv
from toolkit.core.config import load
from toolkit.core.errors import BuildError, ConfigError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "build_kernel"

NVCC = Toolkit(
    "cuda",
    "13.0",
    "/cuda-13.0",
    "/cuda-13.0/bin/nvcc",
    "13.0.88",
    ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"),
)


def _env(version: str, cuda: str = "13.0") -> TorchEnv:
    t = f"/envs/{version}/torch"
    return TorchEnv(
        f"/envs/{version}/bin/python",
        version,
        t,
        cuda=cuda,
        include_dirs=(f"{t}/include",),
        lib_dir=f"{t}/lib",
        python_include="/py/include",
        cxx11_abi=True,
    )


HOST2 = HostFacts(
    "linux",
    "x86_64",
    (NVCC,),
    (_env("2.14.1+cu130"), _env("2.13.0+cu130")),
    cxx="/usr/bin/g++",
    cxx_version="g++ 12.2.0",
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    copy_build_kernel(root)
    return root


def _plan(root: Path, names: list[str], host: HostFacts = HOST2) -> BuildPlan:
    cfg = load(root)
    proj = load_project(cfg)
    variants = tuple(parse_name(n) for n in names)
    judged = judge(variants, host, ("cuda",), None, None)
    return make_plan(proj, judged, cxx=host.cxx, cxx_id=host.cxx_version, gen_include="/gen")


TWO = ["torch214-cxx11-cu130-x86_64-linux", "torch213-cxx11-cu130-x86_64-linux"]


def test_torch_independent_objects_are_planned_once_for_two_torch_versions(project: Path) -> None:
    plan = _plan(project, TWO)
    assert [v.status.buildable for v in plan.variants] == [True, True]
    steps = plan.steps_for(plan.buildable())
    by_tool: dict[str, list[Step]] = {}
    for s in steps:
        by_tool.setdefault(s.label.split()[0], []).append(s)
    assert len(by_tool["nvcc"]) == 1  # scale.cu once, shared
    assert len(by_tool["c"]) == 1  # glibc_compat.c once, shared
    assert len(by_tool["c++"]) == 2  # the binding, once per torch
    assert len(by_tool["link"]) == 2
    nvcc = by_tool["nvcc"][0]
    assert all(nvcc.id in v.steps for v in plan.variants)
    # Building each variant from scratch would have been 2 x 4 invocations; the plan has 6.
    assert sum(len(v.steps) for v in plan.variants) == 8 and len(steps) == 6


def test_kernel_object_flags_come_from_build_toml_and_have_no_torch(project: Path) -> None:
    plan = _plan(project, TWO[:1])
    nvcc = next(s for s in plan.steps.values() if s.tool == "nvcc")
    argv = " ".join(nvcc.argv)
    assert "-gencode=arch=compute_80,code=sm_80" in argv
    assert "-use_fast_math" in argv and "-I../../../vendor/ggml/src" in argv and "-fPIC" in argv
    assert "torch" not in argv.replace(f"-ffile-prefix-map={project}=.", "") and "TORCH_EXTENSION_NAME" not in argv
    assert nvcc.argv[0] == NVCC.compiler and nvcc.inputs == ("csrc/cuda/scale.cu",)


def test_binding_flags_per_torch_version(project: Path) -> None:
    plan = _plan(
        project,
        ["torch214-cxx11-cu130-x86_64-linux"],
        replace(HOST2, envs=(_env("2.14.1+cu130"), _env("2.11.0+cu130"))),
    )
    bind = next(s for s in plan.steps.values() if s.id.startswith("bind"))
    v = plan.variants[0]
    assert v.ops_id.startswith("_mini_kernel_cuda_") and len(v.ops_id.rsplit("_", 1)[1]) == 7
    for flag in (
        f"-DTORCH_EXTENSION_NAME={v.ops_id}",
        "-DPy_LIMITED_API=0x03090000",
        "-DCUDA_KERNEL",
        "-DUSE_CUDA=1",
        "-D_GLIBCXX_USE_CXX11_ABI=1",
        "-std=c++20",
        "-fvisibility=hidden",
        "-I/envs/2.14.1+cu130/torch/include",
        "-I/cuda-13.0/include",
    ):
        assert flag in bind.argv, flag
    assert "-I/gen" not in bind.argv  # registration.h is the rendered one next to the binding
    assert v.link is not None
    link = plan.steps[v.link]
    assert "-ltorch_cuda" in link.argv and "-lc10_cuda" in link.argv and "-lcudart" in link.argv
    assert not any("rpath" in a for a in link.argv)
    assert link.output == f"{v.ops_id}.abi3.so" and v.archs == ("8.0",)
    # torch < 2.12 compiles the binding as C++17 (kernel-builder's rule)
    p11 = _plan(project, ["torch211-cxx11-cu130-x86_64-linux"], replace(HOST2, envs=(_env("2.11.0+cu130"),)))
    b11 = next(s for s in p11.steps.values() if s.id.startswith("bind"))
    assert "-std=c++17" in b11.argv


def test_torch_dependent_kernel_section_is_compiled_per_torch(project: Path) -> None:
    text = (project / BUILD_KERNEL_SRC / "build.toml").read_text().replace("depends = []", 'depends = ["torch"]')
    (project / BUILD_KERNEL_SRC / "build.toml").write_text(text)
    plan = _plan(project, TWO)
    nvcc = [s for s in plan.steps_for(plan.buildable()) if s.tool == "nvcc"]
    assert len(nvcc) == 2
    assert any("-I/envs/2.13.0+cu130/torch/include" in s.argv for s in nvcc)


def test_capabilities_gencode_and_toolkit_intersection() -> None:
    assert gencode_flags(("9.0a", "12.0+PTX")) == (
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_120,code=sm_120",
        "-gencode=arch=compute_120,code=compute_120",
    )
    assert supported_capabilities(("7.0", "8.0", "9.0a", "12.0+PTX"), ("sm_75", "sm_80", "sm_90")) == ("8.0", "9.0a")
    assert supported_capabilities(("7.0",), ()) == ("7.0",)  # unknown toolkit: keep
    assert sort_archs({"12.0+PTX", "8.0", "10.0", "7.5", "9.0a"}) == ("7.5", "8.0", "9.0a", "10.0", "12.0+PTX")
    with pytest.raises(BuildError):
        gencode_flags(("sm_80",))


def test_no_supported_capability_makes_the_variant_unbuildable_with_reason(project: Path) -> None:
    text = (
        (project / BUILD_KERNEL_SRC / "build.toml")
        .read_text()
        .replace('cuda-capabilities = ["8.0"]', 'cuda-capabilities = ["5.0"]')
    )
    (project / BUILD_KERNEL_SRC / "build.toml").write_text(text)
    plan = _plan(project, TWO[:1])
    v = plan.variants[0]
    assert not v.status.buildable and "5.0" in v.status.reason and "cuda 13.0.88" in v.status.reason


def test_offhost_variants_are_planned_with_symbolic_tools(project: Path) -> None:
    plan = _plan(project, ["torch213-cxx11-cu126-x86_64-linux"])
    v = plan.variants[0]
    assert not v.status.buildable and "12.6" in v.status.reason
    steps = [plan.steps[s] for s in v.steps]
    assert steps and not any(s.runnable for s in steps)
    assert steps[0].argv[0] == "<cuda 12.6>/bin/nvcc"


def test_rocm_and_metal_sections_plan_their_toolchains(project: Path) -> None:
    text = (project / BUILD_KERNEL_SRC / "build.toml").read_text()
    text = text.replace('backends = ["cuda"]', 'backends = ["cuda", "rocm", "metal"]')
    text += (
        '\n[kernel.mini_rocm]\nbackend = "rocm"\ndepends = []\nsrc = ["csrc/cuda/scale.cu"]\n'
        'include = ["vendor/ggml/src"]\nrocm-archs = ["gfx942", "gfx1100"]\nhip-flags = ["-Wno-unused"]\n'
        '\n[kernel.mini_metal]\nbackend = "metal"\ndepends = ["torch"]\n'
        'src = ["csrc/metal/scale.mm", "csrc/metal/scale.metal"]\ninclude = ["vendor/ggml/src"]\n'
    )
    (project / BUILD_KERNEL_SRC / "build.toml").write_text(text)
    (project / BUILD_KERNEL_SRC / "csrc" / "metal").mkdir()
    (project / BUILD_KERNEL_SRC / "csrc" / "metal" / "scale.mm").write_text("// mm\n")
    (project / BUILD_KERNEL_SRC / "csrc" / "metal" / "scale.metal").write_text("// metal\n")
    cfg = load(project)
    proj = load_project(cfg)
    judged = judge(
        (parse_name("torch214-cxx11-rocm72-x86_64-linux"), parse_name("torch214-metal-aarch64-darwin")),
        HOST2,
        ("cuda", "rocm", "metal"),
        None,
        None,
    )
    plan = make_plan(proj, judged, cxx="g++", gen_include="/gen")
    rocm, metal = plan.variants
    r_steps = [plan.steps[s] for s in rocm.steps]
    hip = next(s for s in r_steps if s.tool == "hipcc")
    assert "--offload-arch=gfx942" in hip.argv and "-DGGML_USE_HIP" in hip.argv and "-Wno-unused" in hip.argv
    assert rocm.link is not None and metal.link is not None
    assert rocm.archs == ("gfx1100", "gfx942") and "-lamdhip64" in plan.steps[rocm.link].argv
    assert hip.argv.count("-DGGML_USE_HIP") >= 1 and any("gfx942 compiles wave64" in n for n in rocm.notes)
    assert any("gfx1100 compiles wave32" in n for n in rocm.notes)
    m_steps = [plan.steps[s] for s in metal.steps]
    tools = [s.tool for s in m_steps]
    assert tools.count("metal") == 1 and "metallib" in tools and "python" in tools
    air = next(s for s in m_steps if s.tool == "metal")
    assert "-std=metal4.0" in air.argv
    mm = next(s for s in m_steps if s.label.startswith("c++ csrc/metal/scale.mm"))
    assert f'-DEMBEDDED_METALLIB_HEADER="{metal.ops_id}_metallib.h"' in mm.argv and "objective-c++" in mm.argv
    assert any(plan.steps[a].tool == "python" for a in mm.after)  # waits for the embedded metallib header
    assert "Metal" in plan.steps[metal.link].argv
    assert metal.ops_id.startswith("_mini_kernel_metal_")


def test_uid_is_deterministic_and_follows_every_input(project: Path, tmp_path: Path) -> None:
    cfg = load(project)
    a = load_project(cfg).source_id
    assert load_project(cfg).source_id == a
    other = tmp_path / "other"
    shutil.copytree(project, other)
    assert load_project(load(other)).source_id == a  # location-independent
    hdr = project / "vendor" / "ggml" / "src" / "ggml-cuda" / "mini.cuh"
    hdr.write_text(hdr.read_text() + "// edited\n")
    b = load_project(cfg).source_id
    assert b != a
    (project / BUILD_KERNEL_SRC / "torch-ext" / "mini_kernel" / "__init__.py").write_text("from ._ops import ops\n")
    assert load_project(cfg).source_id not in (a, b)


def test_invalid_build_toml_is_rejected_by_kernels_parser(project: Path) -> None:
    text = (project / BUILD_KERNEL_SRC / "build.toml").read_text().replace("edition = 5", "edition = 5\ncolour = 1")
    (project / BUILD_KERNEL_SRC / "build.toml").write_text(text)
    with pytest.raises(BuildError, match="rejected by kernels"):
        load_project(load(project))


def test_missing_build_toml_says_render_first(project: Path) -> None:
    (project / BUILD_KERNEL_SRC / "build.toml").unlink()
    with pytest.raises(BuildError, match="render"):
        load_project(load(project))


def test_depfile_parsing() -> None:
    text = "out.o: a.cu vendor/x\\ y.h \\\n /usr/include/z.h\n"
    assert parse_depfile(text) == ["a.cu", "vendor/x y.h", "/usr/include/z.h"]


def test_cache_entry_is_invalidated_when_a_recorded_project_dependency_changes(project: Path, tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "c", project)
    art = tmp_path / "a.o"
    art.write_bytes(b"obj")
    hdr = "vendor/ggml/src/ggml-cuda/mini.cuh"
    cache.store("obj", "k" * 64, {"a.o": art}, [hdr, "/usr/include/stdio.h"], {})
    assert cache.lookup("obj", "k" * 64) is not None
    manifest = json.loads((cache.entry_dir("obj", "k" * 64) / "manifest.json").read_text())
    assert list(manifest["deps"]) == [hdr]  # outside-project deps are covered by the toolchain identity
    (project / hdr).write_text("changed")
    assert BuildCache(tmp_path / "c", project).lookup("obj", "k" * 64) is None


def _executor(plan: BuildPlan, project: Path, tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(
        plan,
        BuildCache(tmp_path / "c", project),
        jobs=1,
        provenance=read_provenance(project),
        log_dir=tmp_path / "l",
        gen_dir=tmp_path / "g",
    )


def test_metadata_is_strict_kernels_metadata_with_provenance(project: Path, tmp_path: Path) -> None:
    plan = _plan(project, TWO[:1])
    ex = _executor(plan, project, tmp_path)
    meta = ex.metadata(plan.variants[0])
    pytest.importorskip("kernels", reason="kernels is not installed: its metadata parser cannot be asked")
    from toolkit.core.kernels_client import kernels_type

    kernels_type("Metadata").from_bytes(json.dumps(meta).encode())
    assert meta["id"] == plan.variants[0].ops_id and meta["backend"] == {"type": "cuda", "archs": ["8.0"]}
    ours = meta["provenance"]["ggml-vendor"]
    assert ours["upstream"]["commit"] == "0123456789abcdef0123456789abcdef01234567"
    assert ours["dirty"] is False and ours["patches"] == [] and ours["tool-version"]
    hdr = project / "vendor" / "ggml" / "src" / "ggml-cuda" / "mini.cuh"
    hdr.write_text("// edited\n")
    assert read_provenance(project).vendor_dirty is True


def test_the_rendered_ops_py_gets_the_namespace(project: Path, tmp_path: Path) -> None:
    plan = _plan(project, TWO[:1])
    ex = _executor(plan, project, tmp_path)
    v = plan.variants[0]
    text = ex._python_files(v)["_ops.py"].decode()
    assert f"from . import {v.ops_id}" in text and "@OPS_NAME@" not in text
    (project / BUILD_KERNEL_SRC / "torch-ext" / "mini_kernel" / "_ops.py").write_text('NAME = "@OPS_NAME@"\n')
    plan = _plan(project, TWO[:1])
    ex.plan = plan
    assert ex._python_files(plan.variants[0])["_ops.py"] == f'NAME = "{plan.variants[0].ops_id}"\n'.encode()


def test_every_package_brings_its_registration_h_and_ops_py_and_the_build_supplies_none(
    project: Path, tmp_path: Path
) -> None:
    """Every package's render writes both (the tool's toolkit/data/package): the build uses those, adds no
    include dir of its own for them, and refuses a tree without them rather than making them up."""
    plan = _plan(project, TWO[:1])
    bind = next(s for s in plan.steps.values() if s.id.startswith("bind"))
    assert "-I/gen" not in bind.argv
    src = project / BUILD_KERNEL_SRC
    assert "kernel-builder" in (src / "torch-ext" / "registration.h").read_text()
    for rel in ("torch-ext/registration.h", "torch-ext/mini_kernel/_ops.py"):
        saved = (src / rel).read_bytes()
        (src / rel).unlink()
        with pytest.raises(BuildError, match=f"{rel} does not exist.*ggml-vendor render -p mini-kernel"):
            _plan(project, TWO[:1])
        (src / rel).write_bytes(saved)
    ex = _executor(plan, project, tmp_path)
    assert f"from . import {plan.variants[0].ops_id}" in ex._python_files(plan.variants[0])["_ops.py"].decode()


def test_variant_intact_detects_edits_and_extra_files(tmp_path: Path) -> None:
    import base64
    import hashlib

    d = tmp_path / "v"
    d.mkdir()
    (d / "a.py").write_text("x")
    digest = base64.b64encode(hashlib.sha256(b"x").digest()).decode()
    (d / "metadata.json").write_text(json.dumps({"digest": {"algorithm": "sha256", "files": {"a.py": digest}}}))
    assert variant_intact(d)
    (d / "b.py").write_text("y")
    assert not variant_intact(d)
    (d / "b.py").unlink()
    (d / "a.py").write_text("z")
    assert not variant_intact(d)


def test_kernel_section_torch_dependency_flag() -> None:
    assert KernelSection("k", "cuda", ("torch",), ()).torch_dependent
    assert not KernelSection("k", "cuda", (), ()).torch_dependent


# --- the command, without compiling ---------------------------------------------------------------------


def test_build_dry_run_json_lists_the_matrix_and_writes_nothing(project: Path) -> None:
    from toolkit.cli import app

    def tree() -> dict[str, int]:
        return {p.relative_to(project).as_posix(): p.stat().st_mtime_ns for p in project.rglob("*")}

    before = tree()
    res = CliRunner().invoke(app, ["build", "-C", str(project), "--all", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    assert tree() == before  # not even the build cache's memos
    doc = json.loads(res.stdout)
    names = [v["name"] for v in doc["variants"]]
    assert "torch213-cxx11-cu126-aarch64-linux" in names and "torch214-metal-aarch64-darwin" in names
    for v in doc["variants"]:
        assert v["status"].startswith("buildable") or v["reason"]
    assert built_variants(project) == []


def test_build_unknown_variant_glob_exits_2(project: Path) -> None:
    from toolkit.cli import app

    res = CliRunner().invoke(app, ["build", "-C", str(project), "--variant", "torch299-*"])
    assert res.exit_code == ConfigError.exit_code
    assert "matches no variant" in res.output


def test_build_with_nothing_buildable_exits_10_and_writes_nothing(project: Path) -> None:
    from toolkit.cli import app

    # (the system toolchain cannot cross-build: with zig and an aarch64 libstdc++ these rows are buildable)
    res = CliRunner().invoke(app, ["build", "-C", str(project), "--variant", "*-aarch64-*", "--toolchain", "system"])
    assert res.exit_code == 10, res.output
    assert "nothing to build" in res.output
    assert built_variants(project) == []


# --- torch environments ---------------------------------------------------------------------------------


def test_managed_envs_are_discovered_without_importing_torch(tmp_path: Path) -> None:
    from toolkit.build.torchenvs import discover_envs

    venv = tmp_path / "torch213-cu130"
    tdir = venv / "lib" / "python3.11" / "site-packages" / "torch"
    tdir.mkdir(parents=True)
    (tdir / "version.py").write_text("__version__ = '2.13.0+cu130'\ncuda = '13.0'\nhip = None\n")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    envs = [e for e in discover_envs(tmp_path) if e.managed]
    assert [(e.version, e.compute, e.python) for e in envs] == [("2.13.0+cu130", "cu130", str(venv / "bin" / "python"))]


def test_env_creation_is_atomic(tmp_path: Path) -> None:
    import sys

    from toolkit.build.torchenvs import EnvPlan, create_env, plan_env

    p = plan_env("2.13", "cu130", "https://download.pytorch.org/whl/cu130", tmp_path)
    assert p.path == tmp_path / "torch213-cu130"
    assert p.commands[-1][-3:] == ("torch==2.13.*", "--index-url", "https://download.pytorch.org/whl/cu130")
    assert plan_env("2.14", "cpu", None, tmp_path).commands[-1][-1] == "torch==2.14.*"  # pip's default index
    bad = EnvPlan(tmp_path / "bad", ((sys.executable, "-c", "import sys; print('no index'); sys.exit(1)"),))
    with pytest.raises(BuildError, match="creating torch environment bad failed"):
        create_env(bad)
    assert list(tmp_path.iterdir()) == []  # nothing half-made
    good_path = tmp_path / "good"
    make = f"import os; os.makedirs(r'{good_path}/bin'); open(r'{good_path}/bin/python', 'w').close()"
    create_env(EnvPlan(good_path, ((sys.executable, "-c", make),)))
    assert (good_path / "bin" / "python").is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["good"]


def test_compiles_map_every_builder_prefix_and_the_link_strips() -> None:
    """Issue 20 item 8, GPU-free: the command lines that make the shipped .so reproducible and path-free."""
    from tests.helpers.fixture_repos import tiny_project_inputs
    from toolkit.build.host_status import Status

    env = _env("2.14.1+cu130")  # torch at /envs/2.14.1+cu130/torch, python headers at /py/include
    judged = [(parse_name("torch214-cxx11-cu130-x86_64-linux"), Status(True, "", "local", NVCC, env))]
    wrap = "/tc/wrap/clang++"
    plan = make_plan(tiny_project_inputs(), judged, cxx=wrap, cxx_id="zig", ccbin=wrap, gen_include="/cache/gen")
    want = {
        "-ffile-prefix-map={tmp}=/out",  # the step's scratch dir: its output and nvcc's tmpxft files
        "-ffile-prefix-map=/cache/gen=/gen",
        f"-ffile-prefix-map={env.torch_dir}=/torch",
        "-ffile-prefix-map=/py=/python-include",
        "-ffile-prefix-map=/cuda-13.0=/toolkit",
        "-ffile-prefix-map=/tc/wrap=/toolchain",
        "-ffile-prefix-map=/p=.",  # the project root
    }
    torch_side = {f"-ffile-prefix-map={env.torch_dir}=/torch", "-ffile-prefix-map=/py=/python-include"}
    toolkit = {"-ffile-prefix-map=/cuda-13.0=/toolkit"}
    compiles = {s.label.split()[1]: s for s in plan.steps.values() if s.kind == "compile"}
    expected = {  # torch-independent objects map no torch path: they stay shared by every torch variant
        "a.cu": want - torch_side,
        "b.cpp": want,
        "glibc_compat.c": want - torch_side - toolkit,
    }
    for src, maps in expected.items():
        got = {a for a in compiles[src].argv if a.startswith("-ffile-prefix-map=")}
        assert got == maps, src
    nvcc = compiles["a.cu"].argv  # to the host compiler, one -Xcompiler each (nvcc splits at commas)
    assert all(nvcc[nvcc.index(a) - 1] == "-Xcompiler" for a in nvcc if a.startswith("-ffile-prefix-map="))
    [link] = [s for s in plan.steps.values() if s.kind == "link"]
    assert link.argv[-1] == "-s"  # what ships is stripped


def test_a_stable_variant_compiles_its_binding_at_the_floor_and_links_its_libstdcxx_copies(project: Path) -> None:
    """Issue 30: the stable binding is compiled at its floor's standard (C++17 for 2.10) although torch 2.14.1 lends
    the headers, and the stable variant alone links libstdcxx_compat.o (geninclude.LIBSTDCXX_COMPAT)."""
    plan = _plan(project, ["torch-stable-abi210-cu130-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux"])
    stable, per_torch = plan.variants
    assert stable.status.buildable, stable.status.reason
    steps = {s.id: s for s in plan.steps.values()}
    labels = {v.variant.name: [steps[i].label for i in v.steps] for v in plan.variants}
    binds = {
        v.variant.name: next(steps[i] for i in v.steps if steps[i].label.startswith("c++ torch-ext"))
        for v in plan.variants
    }
    assert "-std=c++17" in binds[stable.variant.name].argv and "-std=c++20" in binds[per_torch.variant.name].argv
    assert any("libstdcxx_compat.cpp" in label for label in labels[stable.variant.name])
    assert not any("libstdcxx_compat.cpp" in label for label in labels[per_torch.variant.name])
