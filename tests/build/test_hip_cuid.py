"""A ROCm build is the same in every directory: clang names each HIP compilation unit (its `-cuid`, which names
the `__hip_cuid_*` symbol and the externalized static device variables) after a hash of the source's real path
and the whole command line, where the project's path appears (issue 33). The plan passes an explicit `-cuid=`
computed from what does not depend on where the project lies. Tested on the plan: no ROCm compiler is needed."""

from __future__ import annotations

from pathlib import Path

from tests.build.test_plan import HOST2
from tests.helpers import BUILD_KERNEL_SRC, copy_build_kernel
from toolkit.build.inputs import load_project
from toolkit.build.matrix import parse_name
from toolkit.build.stage import judge
from toolkit.build.stepcontext import Step
from toolkit.build.steps import make_plan
from toolkit.core.config import load

ROCM_SECTIONS = (
    '\n[kernel.mini_rocm]\nbackend = "rocm"\ndepends = []\nsrc = ["csrc/cuda/scale.cu"]\n'
    'include = ["vendor/ggml/src"]\nrocm-archs = ["gfx942", "gfx1100"]\n'
    '\n[kernel.mini_rocm_too]\nbackend = "rocm"\ndepends = []\nsrc = ["csrc/cuda/scale.cu"]\n'
    'include = ["vendor/ggml/src"]\nrocm-archs = ["gfx942"]\nhip-flags = ["-Wno-unused"]\n'
)


def _hip_steps(root: Path) -> list[Step]:
    """The hipcc steps of a ROCm variant of the miniature package copied to `root`, with its gen dir inside
    the project (the default build cache is the project's .cache/build)."""
    copy_build_kernel(root)
    toml = root / BUILD_KERNEL_SRC / "build.toml"
    toml.write_text(toml.read_text().replace('backends = ["cuda"]', 'backends = ["cuda", "rocm"]') + ROCM_SECTIONS)
    proj = load_project(load(root))
    judged = judge((parse_name("torch214-cxx11-rocm72-x86_64-linux"),), HOST2, ("cuda", "rocm"), None, None)
    plan = make_plan(proj, judged, cxx="g++", gen_include=str(root / ".cache" / "build" / "gen"))
    [variant] = plan.variants
    return [plan.steps[s] for s in variant.steps if plan.steps[s].tool == "hipcc"]


def _cuids(step: Step) -> list[str]:
    return [a for a in step.argv if a.startswith("-cuid=")]


def test_hip_compiles_name_their_unit_the_same_in_two_directories(tmp_path: Path) -> None:
    a, b = tmp_path / "one" / "proj", tmp_path / "another-place" / "proj"
    steps_a, steps_b = _hip_steps(a), _hip_steps(b)
    assert len(steps_a) == len(steps_b) == 2
    for sa, sb in zip(steps_a, steps_b):
        assert len(_cuids(sa)) == 1, sa.argv  # explicit: clang's default hash would read the path
        assert _cuids(sa) == _cuids(sb)
        assert _cuids(sa)[0].removeprefix("-cuid=").isalnum()  # clang takes letters, digits and _ only
        # The rest of the command line differs only where the project's path is mapped away.
        assert [x.replace(str(a), "<project>") for x in sa.argv] == [x.replace(str(b), "<project>") for x in sb.argv]
        assert all(x.startswith("-ffile-prefix-map=") for x in sa.argv if str(a) in x)


def test_two_units_of_one_variant_get_two_cuids(tmp_path: Path) -> None:
    """One source compiled by two sections (other flags, other archs) makes two units in one .so: their ids differ."""
    steps = _hip_steps(tmp_path / "proj")
    assert len({c for s in steps for c in _cuids(s)}) == 2


def test_the_cuid_ignores_where_the_toolchain_and_torch_lie_but_not_the_flags() -> None:
    from toolkit.build.rocm import cuid_flag

    base = ("-c", "-x", "hip", "csrc/a.cu", "-Ivendor/ggml/src", "--offload-arch=gfx942")
    here = cuid_flag(("/opt/rocm/bin/hipcc", *base, "-I/site/torch/include", "-ffile-prefix-map=/p=."))
    there = cuid_flag(("/usr/lib/rocm-7.2/bin/hipcc", *base, "-I/env/torch/include", "-ffile-prefix-map=/q=."))
    assert here == there
    assert cuid_flag(("/opt/rocm/bin/hipcc", *base, "-O2")) != here
    assert cuid_flag(("/opt/rocm/bin/hipcc", *base[:3], "csrc/b.cu", *base[4:])) != cuid_flag(("/x", *base))
