"""`ggml-vendor render`: the template convention, determinism, --check, build.toml validity and the CUDA
translation units' structure (each upstream entry included exactly once, no torch in csrc/cuda)."""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from typer.testing import CliRunner

from tests.helpers.fixture_repos import RENDER_PYPROJECT
from toolkit.cli import app
from toolkit.core import config as config_mod
from toolkit.core import package_facts
from toolkit.core.errors import ConfigError, RenderError
from toolkit.core.lock import Lock
from toolkit.render import context as render_context
from toolkit.render import stage as render

# The first package's op facts over ggml's shared ones (templates/facts.py), as render sees them.
FACTS = package_facts.load(Path(__file__).resolve().parents[2] / "templates" / "ggml-attn-kernels", "ggml-attn-kernels")

REPO = Path(__file__).resolve().parents[2]
SRC = Path("build/ggml-attn-kernels/src")  # where render writes the package's source tree


def make_project(
    tmp: Path,
    backends: Sequence[str] = ("cuda",),
    archs: Sequence[str] = ("8.0", "9.0"),
    templates: Path | None = None,
    name: str = "proj",
) -> Path:
    root = tmp / name
    root.mkdir()
    (root / "pyproject.toml").write_text(
        RENDER_PYPROJECT.format(
            backends=", ".join(f'"{b}"' for b in backends), archs=", ".join(f'"{a}"' for a in archs)
        )
    )
    if templates is None:
        shutil.copytree(REPO / "templates", root / "templates")
    else:
        shutil.copytree(templates, root / "templates" / "ggml-attn-kernels")
    (root / "vendor").mkdir()
    return root


def rendered(root: Path) -> render.RenderPlan:
    return render.plan(config_mod.load(root))


def test_every_package_of_the_repository_renders_reproducibly() -> None:
    """Each package of this repository renders the same bytes twice (CI's `render --check`); nothing is committed."""
    project = config_mod.load(REPO)
    for view in project.selected(()):
        first = render.plan(view)
        assert first.root == REPO / "build" / view.name / "src"
        assert render.unreproducible(view, first) == [], view.name


def test_render_is_deterministic_and_check_passes_after_write(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    first = rendered(root)
    second = rendered(root)
    assert [(f.path, f.content) for f in first.files] == [(f.path, f.content) for f in second.files]
    assert {d.kind for d in render.check(first)} == {"missing"}
    changed = render.write(first)
    assert {d.path for d in changed} == {f.path for f in first.files}
    assert render.check(rendered(root)) == []
    assert render.write(rendered(root)) == []  # nothing to do the second time
    # the bytes do not depend on where the project lives
    other = make_project(tmp_path, name="elsewhere")
    assert [(f.path, f.content) for f in rendered(other).files] == [(f.path, f.content) for f in first.files]


def test_a_hand_edited_file_is_stale_and_rendered_again_and_check_is_reproducibility(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    runner = CliRunner()
    ok = runner.invoke(app, ["render", "-C", str(root)])
    assert ok.exit_code == 0, ok.output
    assert runner.invoke(app, ["render", "--check", "-C", str(root)]).exit_code == 0
    target = root / SRC / "torch-ext" / "torch_binding.cpp"
    target.write_text(target.read_text().replace("kFattnKqStride = 256", "kFattnKqStride = 128"))
    planned = runner.invoke(app, ["render", "--dry-run", "-C", str(root)])
    assert planned.exit_code == 0 and f"stale    {SRC}/torch-ext/torch_binding.cpp" in planned.output
    assert "kFattnKqStride = 128" in target.read_text()  # --dry-run changes nothing
    # --check compares two renders, not the tree: a hand edit of build output is render's to undo
    assert runner.invoke(app, ["render", "--check", "-C", str(root)]).exit_code == 0
    (root / SRC / "build.toml").unlink()
    planned = runner.invoke(app, ["render", "--dry-run", "--json", "-C", str(root)])
    assert '"kind": "missing"' in planned.output and f'"path": "{SRC}/build.toml"' in planned.output
    assert runner.invoke(app, ["render", "-C", str(root)]).exit_code == 0
    assert "kFattnKqStride = 256" in target.read_text() and (root / SRC / "build.toml").is_file()


def test_check_fails_naming_a_file_two_renders_disagree_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_project(tmp_path)
    real, count = render_context.build_context, iter(range(10**6))

    def unstable(
        *args: Any, **kwargs: Any
    ) -> dict[str, Any]:  # a template reading a clock or a set's order would do this
        return {**real(*args, **kwargs), "cuda_flags": (f"-DRUN={next(count)}",)}

    monkeypatch.setattr(render_context, "build_context", unstable)
    bad = CliRunner().invoke(app, ["render", "--check", "--json", "-C", str(root)])
    assert bad.exit_code == RenderError.exit_code, bad.output
    assert '"kind": "unreproducible"' in bad.output and f'"path": "{SRC}/build.toml"' in bad.output
    assert not (root / "build").exists()  # --check writes nothing


def test_orphaned_generated_files_are_reported_and_removed_but_hand_written_ones_stay(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    render.write(rendered(root))
    orphan = root / SRC / "csrc" / "cuda" / "old_kernels.cu"
    orphan.write_text(f"// {render.GENERATED_MARKER} from templates/csrc/cuda/old_kernels.cu.j2.\n")
    mine = root / SRC / "csrc" / "cuda" / "notes.txt"
    mine.write_text("written by a person\n")
    drift = render.check(rendered(root))
    assert drift == [render.FileChange("csrc/cuda/old_kernels.cu", "orphan")]
    render.write(rendered(root))
    assert not orphan.exists() and mine.exists()


def test_build_toml_is_edition_5_valid_and_follows_config(tmp_path: Path) -> None:
    from toolkit.core.kernels_client import kernels_type

    Build = kernels_type("Build")

    root = make_project(tmp_path, archs=("7.5", "9.0a"))
    render.write(rendered(root))
    Build.open(str(root / SRC))  # kernels' own parser (the one kernel-builder uses)
    doc = tomlkit.parse((root / SRC / "build.toml").read_text()).unwrap()
    assert doc["general"]["edition"] == 5 and doc["general"]["backends"] == ["cuda"]
    assert (
        doc["general"]["name"] == "ggml-attn-kernels"
        and doc["general"]["hub"]["repo-id"] == "example/ggml-attn-kernels"
    )
    kernels = doc["kernel"]
    assert set(kernels) == {
        "gated_delta_net_cuda",
        "flash_attn_cuda",
        "ssm_conv_cuda",
        "ggml_shim_cuda",
        "gdn_prep_cuda",
    }
    for name, k in kernels.items():
        assert k["backend"] == "cuda" and k["depends"] == [], name  # torch-independent objects
        assert k["cuda-capabilities"] == ["7.5", "9.0a"]
        assert k["cuda-flags"] == list(FACTS.CUDA_FLAGS)
        assert k["include"] == [f"../../../vendor/ggml/{d}" for d in ("include", "src", "src/ggml-cuda")]
        for src in k["src"]:
            assert src.startswith("csrc/cuda/") and (root / SRC / src).is_file(), src  # never a vendored .cu
    assert all((root / SRC / s).is_file() for s in doc["torch"]["src"])


def test_each_upstream_entry_is_included_exactly_once_and_no_torch_in_cuda_units(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    render.write(rendered(root))
    units = sorted((root / SRC / "csrc" / "cuda").glob("*.cu"))
    assert [u.name for u in units] == [
        "fa_vec_kernels.cu",
        "gdn_kernels.cu",
        "gdn_prep.cu",
        "ggml_shim.cu",
        "ssm_conv_kernels.cu",
    ]
    includes = [inc for u in units for inc in re.findall(r'^#include "([^"]+)"', u.read_text(), re.M)]
    assert includes.count("ggml-cuda/gated_delta_net.cu") == 1
    assert includes.count("ggml-cuda/fattn-vec.cuh") == 1
    assert includes.count("ggml-cuda/ssm-conv.cu") == 1
    for u in [*units, root / SRC / "csrc" / "cuda" / "ggml_launchers.h"]:
        text = u.read_text()
        assert not re.search(r"#include\s*[<\"](torch|ATen|c10)/", text), u.name
    binding = (root / SRC / "torch-ext" / "torch_binding.cpp").read_text()
    assert '#include "../csrc/cuda/ggml_launchers.h"' in binding
    assert binding.count("TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME") == 1


def test_instance_tables_come_from_the_facts(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    render.write(rendered(root))
    gdn = (root / SRC / "csrc" / "cuda" / "gdn_kernels.cu").read_text()
    switch = gdn[gdn.index("ggml_vendor_gdn_supports(int64_t head_dim)") :]
    switch = switch[: switch.index("default:")]
    assert tuple(int(d) for d in re.findall(r"case (\d+):", switch)) == FACTS.GDN_CUDA_HEAD_DIMS
    fa = (root / SRC / "csrc" / "cuda" / "fa_vec_kernels.cu").read_text()
    instances = set(re.findall(r"flash_attn_ext_vec<(\d+), (\d), (\w+), (\w+), false>", fa))
    expected = {
        (str(d), str(n), t, t)
        for d in FACTS.FA_VEC_CUDA_HEAD_DIMS
        for n in FACTS.FA_VEC_CUDA_NCOLS
        for _, t in FACTS.FA_VEC_CUDA_KV_TYPES
    }
    assert instances == expected
    assert (
        f"kFaMaxQueries = {FACTS.FA_VEC_MAX_QUERIES};" in (root / SRC / "torch-ext" / "torch_binding.cpp").read_text()
    )
    shim = (root / SRC / "csrc" / "cuda" / "ggml_shim.cu").read_text()
    for field, _expr in FACTS.CUDA_DEVICE_INFO_FIELDS:
        assert f"info.devices[id].{field} = " in shim  # by name, never positionally
    for sym in (*FACTS.SHIM_SYMBOLS_CXX, *FACTS.SHIM_SYMBOLS_C):
        assert re.search(rf"\b{sym}\(", shim), sym


def test_python_package_parses_on_python_3_9_and_ops_py_carries_the_placeholder(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    render.write(rendered(root))
    pkg = root / SRC / "torch-ext" / "ggml_attn_kernels"
    ops_py = (pkg / "_ops.py").read_text()
    for py in pkg.glob("*.py"):
        text = py.read_text().replace(render.OPS_NAME_PLACEHOLDER, "_ggml_attn_kernels_cuda_abc1234")
        ast.parse(text, filename=str(py), feature_version=(3, 9))
    code = "\n".join(line for line in ops_py.splitlines() if not line.lstrip().startswith("#"))
    assert code.count(render.OPS_NAME_PLACEHOLDER) == 3  # import, torch.ops.<id>, the prefix
    init = (pkg / "__init__.py").read_text()
    for op in ("gated_delta_net", "gated_delta_net_", "flash_attn"):
        assert f'register_fake(add_op_namespace_prefix("{op}"))' in init


def test_template_convention(tmp_path: Path) -> None:
    t = tmp_path / "templates"  # one package's templates: only build.toml, torch-ext/ and csrc/ render
    (t / "facts.py").parent.mkdir(parents=True, exist_ok=True)
    (t / "facts.py").write_bytes((REPO / "templates" / "ggml-attn-kernels" / "facts.py").read_bytes())
    files = {
        "build.toml.j2": (REPO / "templates" / "ggml-attn-kernels" / "build.toml.j2").read_text(),
        "torch-ext/__module__/extra.py.j2": "# {{ notice }}\nNAME = {{ module | tojson }}\n",
        "_partials/metal.toml.j2": "",
        "_partials/rocm.toml.j2": "",
        "card/CARD.md.j2": "{{ this_is_not_rendered_by_render }}",
        "csrc/metal/m.mm.j2": "// {{ notice }}\n",
        "csrc/cuda/c.cu.j2": "// {{ notice }}\n",
    }
    for rel, text in files.items():
        (t / rel).parent.mkdir(parents=True, exist_ok=True)
        (t / rel).write_text(text)
    shared = {"torch-ext/registration.h", "torch-ext/ggml_attn_kernels/_ops.py"}  # the tool's, every package's
    for backends, expect in [
        (("cuda",), {"build.toml", "torch-ext/ggml_attn_kernels/extra.py", "csrc/cuda/c.cu", *shared}),
        (("metal",), {"build.toml", "torch-ext/ggml_attn_kernels/extra.py", "csrc/metal/m.mm", *shared}),
        # ROCm hipifies the CUDA sources, so csrc/cuda renders for it too.
        (("rocm",), {"build.toml", "torch-ext/ggml_attn_kernels/extra.py", "csrc/cuda/c.cu", *shared}),
    ]:
        root = make_project(tmp_path, backends=backends, templates=t, name="-".join(backends))
        got = rendered(root)
        assert {f.path for f in got.files} == expect, backends
        extra = got.by_path()["torch-ext/ggml_attn_kernels/extra.py"].content
        assert 'NAME = "ggml_attn_kernels"' in extra and render.GENERATED_MARKER in extra
        assert "templates/ggml-attn-kernels/torch-ext/__module__/extra.py.j2" in extra


def test_undefined_name_fails_naming_the_template_and_writes_nothing(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    render.write(rendered(root))
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and "templates" not in p.parts}
    (root / "templates" / "ggml-attn-kernels" / "csrc" / "cuda" / "broken.cu.j2").write_text(
        "// {{ notice }}\n{{ no_such_name }}\n"
    )
    with pytest.raises(RenderError, match=r"broken\.cu\.j2.*no_such_name"):
        rendered(root)
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and "templates" not in p.parts}
    assert after == before


def test_template_without_notice_is_rejected(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    (root / "templates" / "ggml-attn-kernels" / "csrc" / "cuda" / "quiet.cu.j2").write_text("int x;\n")
    with pytest.raises(RenderError, match="quiet.cu.j2.*notice"):
        rendered(root)


def test_a_build_toml_that_kernels_rejects_fails_render(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    bt = root / "templates" / "ggml-attn-kernels" / "build.toml.j2"
    bt.write_text(
        bt.read_text().replace("edition = {{ build_edition }}", "edition = {{ build_edition }}\nnot-a-key = 1")
    )
    with pytest.raises(RenderError, match="kernels' parser"):
        rendered(root)


def test_the_lock_commit_reaches_the_translation_units(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    lock = Lock(
        upstream="https://github.com/ggml-org/ggml",
        layout="ggml",
        commit="d" * 40,
        rev="master",
        date="",
        subject="",
        tool_version="",
        files={},
    )
    got = render.plan(config_mod.load(root), lock).by_path()
    assert f"Vendored ggml commit: {'d' * 40}" in got["csrc/cuda/gdn_kernels.cu"].content
    assert f"Vendored ggml commit: {'d' * 40}" in got["csrc/cuda/fa_vec_kernels.cu"].content


def test_config_without_a_cuda_entry_is_a_render_error(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    pp = root / "pyproject.toml"
    pp.write_text(pp.read_text().replace('cuda = ["src/ggml-cuda/fattn-vec.cuh"]\n', ""))
    # Caught when the config loads (exit 2), before render: the op has no entry for the package's backends.
    with pytest.raises(ConfigError, match="op 'flash_attn' has no entry file for any of the package's backends"):
        rendered(root)


def test_include_spelling_follows_ggml_include_roots() -> None:
    assert render_context.include_spelling("src/ggml-cuda/gated_delta_net.cu") == "ggml-cuda/gated_delta_net.cu"
    assert render_context.include_spelling("include/ggml.h") == "ggml.h"
    assert render.output_path("torch-ext/__module__/_ops.py.j2", "m") == "torch-ext/m/_ops.py"


@pytest.mark.parametrize("lands", ["while printing", "before any file", "after some files"])
def test_ctrl_c_says_which_generated_files_are_written_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lands: str
) -> None:
    """Issue 33 item 3: a Ctrl-C once render's plan is made says what the tree holds, read back from disk."""
    from toolkit.commands import render as render_command
    from toolkit.core import fs

    root = make_project(tmp_path)
    calls = {"n": 0}
    real_write = fs.atomic_write

    def some_then_ctrl_c(path: Path, data: bytes) -> None:
        calls["n"] += 1
        if lands == "before any file" or calls["n"] > 2:
            raise KeyboardInterrupt
        real_write(path, data)

    if lands == "while printing":
        monkeypatch.setattr(render_command, "_show", lambda *_a: (_ for _ in ()).throw(KeyboardInterrupt()))
    else:
        monkeypatch.setattr(render, "atomic_write", some_then_ctrl_c)
    res = CliRunner().invoke(app, ["render", "-C", str(root)])
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]
    expected = {
        "while printing": "every generated file is as rendered (read back from disk): it had completed",
        "before any file": "nothing was written:",
        "after some files": f"2 of {len(rendered(root).files)} generated file(s) written;",
    }[lands]
    assert last.startswith("interrupted:") and expected in last, res.output
