"""A family of kernel packages in one project: config, one pin's union closure, per-package stages, `init`.

The fixture project declares the fixture ops as its first package and a second package (`fixture-quant`)
whose one op enters the miniature upstream through src/ggml-cuda/fattn.cu: it shares most of its closure
with the first package's flash_attn and adds two files of its own, so the union has something to dedupe
and something only the second package needs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.helpers.fixture_repos import FA_CUDA, GDN_CUDA, METAL, SSM_CUDA, FixtureRepo, locked, make_project
from tests.helpers.project import demo_family_source
from toolkit.cli import app
from toolkit.core import config
from toolkit.core.config import Config
from toolkit.core.errors import ConfigError
from toolkit.core.lock import Lock, read_lock
from toolkit.core.package_table import Entry
from toolkit.render.stage import RenderedFile
from toolkit.sync.closure import compute_closure
from toolkit.sync.execution import execute
from toolkit.sync.project_plan import SyncRequest, prepare

runner = CliRunner()

SECOND = """
[tool.ggml-vendor.packages.fixture-quant]
version = 2
hub-repo = "someone/fixture-quant"
backends = ["cuda"]

[tool.ggml-vendor.packages.fixture-quant.ops.quant]
cuda = ["src/ggml-cuda/fattn.cu"]
"""
QUANT_ONLY = {"src/ggml-cuda/fattn.cu", "src/ggml-cuda/fattn-mma.cuh"}
QUANT_CUDA = FA_CUDA | QUANT_ONLY


pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")  # a fresh upstream cache per test, no mirror


def family(tmp_path: Path, up: FixtureRepo, extra: str = SECOND) -> Path:
    root = make_project(tmp_path / "proj", str(up.path))
    with (root / "pyproject.toml").open("a") as fh:
        fh.write(extra)
    facts = root / "templates" / "fixture-quant" / "facts.py"  # every package's templates hold its facts
    facts.parent.mkdir(parents=True, exist_ok=True)
    facts.write_text(QUANT_TEMPLATES["facts.py"])
    return root


def edited(tmp_path: Path, up: FixtureRepo, old: str, new: str) -> Path:
    root = family(tmp_path, up)
    text = (root / "pyproject.toml").read_text()
    assert old in text, old
    (root / "pyproject.toml").write_text(text.replace(old, new, 1))
    return root


# --- config --------------------------------------------------------------------------------------------


def test_packages_load_in_order_with_defaults(tmp_path: Path, up: FixtureRepo) -> None:
    cfg = config.load(family(tmp_path, up))
    assert [p.name for p in cfg.packages] == ["fixture-kernels", "fixture-quant"]
    first, second = cfg.packages
    for pkg in (first, second):  # one shape for every package
        assert (pkg.templates, pkg.source, pkg.variants) == (
            f"templates/{pkg.name}",
            f"build/{pkg.name}/src",
            f"variants/{pkg.name}.toml",
        )
    assert cfg.name == "fixture-kernels" and cfg.package_root == cfg.root / "build/fixture-kernels/src"
    assert cfg.build_dir == cfg.root / "build" / "fixture-kernels"
    quant = cfg.for_package("fixture-quant")
    assert (quant.name, quant.version, quant.hub_repo, quant.module) == (
        "fixture-quant",
        2,
        "someone/fixture-quant",
        "fixture_quant",
    )
    assert quant.package_root == cfg.root / "build/fixture-quant/src"
    assert quant.templates_dir == cfg.root / "templates/fixture-quant"
    assert quant.variants_file == cfg.root / "variants/fixture-quant.toml"
    assert quant.build_dir == cfg.root / "build" / "fixture-quant"
    assert quant.backends == ("cuda",) and [op.name for op in quant.ops] == ["quant"]
    assert quant.license == cfg.license and quant.upstream == cfg.upstream and quant.vendor_dir == cfg.vendor_dir
    assert second.key("quant") == "fixture-quant:quant" and first.key("flash_attn") == "fixture-kernels:flash_attn"


def test_selected_filters_and_names_the_nearest(tmp_path: Path, up: FixtureRepo) -> None:
    cfg = config.load(family(tmp_path, up))
    assert [c.name for c in cfg.selected(())] == ["fixture-kernels", "fixture-quant"]
    assert [c.name for c in cfg.selected(["fixture-quant"])] == ["fixture-quant"]
    with pytest.raises(ConfigError, match=r"no package 'fixture-qant'.*did you mean 'fixture-quant'"):
        cfg.selected(["fixture-qant"])


def test_all_entries_is_every_package_with_qualified_keys(tmp_path: Path, up: FixtureRepo) -> None:
    cfg = config.load(family(tmp_path, up))
    keys = [(k, b) for k, b, _ in cfg.all_entries()]
    assert keys == [
        ("fixture-kernels:gated_delta_net", "cuda"),
        ("fixture-kernels:gated_delta_net", "metal"),
        ("fixture-kernels:flash_attn", "cuda"),
        ("fixture-kernels:flash_attn", "metal"),
        ("fixture-kernels:ssm_conv", "cuda"),
        ("fixture-kernels:ssm_conv", "metal"),
        ("fixture-quant:quant", "cuda"),
    ]
    assert [(k, b) for k, b, _ in cfg.all_entries(("metal",))] == [
        ("fixture-kernels:gated_delta_net", "metal"),
        ("fixture-kernels:flash_attn", "metal"),
        ("fixture-kernels:ssm_conv", "metal"),
    ]


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        (
            'hub-repo = "someone/fixture-quant"',
            'hub-rpo = "someone/fixture-quant"',
            r"unknown key 'hub-rpo'.*'hub-repo'",
        ),
        ('backends = ["cuda"]\n', 'backends = ["cuda"]\nmodule = "fixture_kernels"\n', "share the Python module"),
        ('hub-repo = "someone/fixture-quant"', 'hub-repo = "someone/fixture-kernels"', "share the Hub repo"),
        ('backends = ["cuda"]', 'backends = ["rocm"]', r"unknown backend 'rocm'"),
        ('cuda = ["src/ggml-cuda/fattn.cu"]', 'metal = ["src/x.metal"]', "op 'quant' has no entry file"),
        ('cuda = ["src/ggml-cuda/fattn.cu"]', 'cudaa = ["src/ggml-cuda/fattn.cu"]', r"unknown backend 'cudaa'.*'cuda'"),
        ('cuda = ["src/ggml-cuda/fattn.cu"]', "cuda = []", "non-empty list"),
        ("[tool.ggml-vendor.packages.fixture-quant]", "[tool.ggml-vendor.packages.Quant]", "not a valid kernel name"),
        ('backends = ["cuda"]\n', 'backends = ["cuda"]\ntemplates = "../out"\n', "path inside the project"),
    ],
)
def test_bad_package_config_is_one_line_exit_2(tmp_path: Path, up: FixtureRepo, old: str, new: str, match: str) -> None:
    root = edited(tmp_path, up, old, new)
    with pytest.raises(ConfigError, match=match):
        config.load(root)
    res = runner.invoke(app, ["render", "--check", "-C", str(root)])
    assert res.exit_code == 2, res.output
    assert len([line for line in res.output.splitlines() if line.strip()]) <= 3, res.output  # one error, wrapped


def test_unknown_shared_key_names_the_nearest(tmp_path: Path, up: FixtureRepo) -> None:
    root = edited(tmp_path, up, 'license = "MIT"', 'license = "MIT"\ncuda-arch = ["9.0"]')
    with pytest.raises(ConfigError, match=r"unknown key 'cuda-arch' \(did you mean 'cuda-archs'\?\)"):
        config.load(root)


def test_package_named_like_the_first_is_refused(tmp_path: Path, up: FixtureRepo) -> None:
    root = family(tmp_path, up, SECOND.replace("fixture-quant", "fixture-kernels"))
    with pytest.raises(ConfigError, match='Key "fixture-kernels" already exists'):  # TOML itself refuses it
        config.load(root)


# --- one pin: the union closure ------------------------------------------------------------------------


def test_union_closure_vendors_each_file_once_and_records_who_needs_it(tmp_path: Path, up: FixtureRepo) -> None:
    cfg = config.load(family(tmp_path, up))
    prep = prepare(cfg, SyncRequest(rev="v1"))
    assert prep.plan is not None
    closure = prep.plan.closure
    assert len(closure.files) == len(set(closure.files))
    assert set(closure.files) == GDN_CUDA | FA_CUDA | SSM_CUDA | METAL | QUANT_ONLY
    quant = closure.for_op("fixture-quant:quant", "cuda")
    assert quant is not None and set(quant.files) == QUANT_CUDA
    assert closure.needed_by["src/ggml-cuda/fattn-mma.cuh"] == ("fixture-quant:quant/cuda",)
    assert closure.needed_by["src/ggml-cuda/fattn-common.cuh"] == (
        "fixture-kernels:flash_attn/cuda",
        "fixture-quant:quant/cuda",
    )
    execute(prep)
    lock = read_lock(cfg.vendor_dir)
    assert lock is not None
    assert dict(lock.packages) == {
        "fixture-kernels": tuple(f"fixture-kernels:{op}" for op in ("gated_delta_net", "flash_attn", "ssm_conv")),
        "fixture-quant": ("fixture-quant:quant",),
    }
    assert set(lock.package_files("fixture-quant")) == QUANT_CUDA
    assert set(lock.package_files("fixture-kernels")) == GDN_CUDA | FA_CUDA | SSM_CUDA | METAL
    vendored = {p.relative_to(cfg.vendor_dir / "ggml").as_posix() for p in (cfg.vendor_dir / "ggml").rglob("*")}
    assert QUANT_ONLY <= vendored
    assert '[packages."fixture-quant"]' in (cfg.vendor_dir / "UPSTREAM").read_text()


def test_one_package_lock_has_no_package_table(tmp_path: Path, up: FixtureRepo) -> None:
    cfg = config.load(make_project(tmp_path / "one", str(up.path)))
    execute(prepare(cfg, SyncRequest(rev="v1")))
    assert "[packages." not in (cfg.vendor_dir / "UPSTREAM").read_text()
    assert locked(cfg.vendor_dir).packages == {}


def test_union_closure_is_pure_over_a_reader() -> None:
    files = {
        "a.cu": b'#include "common.h"\n#include "only_a.h"\n',
        "b.cu": b'#include "common.h"\n',
        "common.h": b"#pragma once\n",
        "only_a.h": b"#pragma once\n",
    }
    entries = [(k, "cuda", Entry((p,))) for k, p in (("a", "a.cu"), ("pkg:b", "b.cu"))]
    closure = compute_closure(entries, files.get, roots=())
    assert closure.files == ("a.cu", "b.cu", "common.h", "only_a.h")
    assert closure.needed_by["common.h"] == ("a/cuda", "pkg:b/cuda")
    assert closure.needed_by["only_a.h"] == ("a/cuda",)


# --- per package: render, build plan, --package ----------------------------------------------------------

QUANT_TEMPLATES = {
    "facts.py": (
        '"""The fixture-quant package\'s op facts (a test fixture)."""\n\n'
        'OPS = ("quant",)\nCUDA_TU_FOR_OP = {"quant": "quant_kernels"}\nQUANT_BLOCK = 32\n'
    ),
    "build.toml.j2": (
        "# {{ notice }}\n[general]\nname = {{ name | tojson }}\nversion = {{ version }}\nedition = 5\n"
        'license = {{ license | tojson }}\nbackends = ["cuda"]\n\n[torch]\nsrc = ["torch-ext/torch_binding.cpp"]\n'
        '{% for key, unit in cuda_units.items() %}\n[kernel.{{ unit.kernel }}]\nbackend = "cuda"\ndepends = []\n'
        "src = {{ unit.src | tojson }}\ninclude = {{ unit.include_dirs | tojson }}\n"
        "cuda-capabilities = {{ cuda_archs | list | tojson }}\n{% endfor %}"
    ),
    "torch-ext/torch_binding.cpp.j2": "// {{ notice }}\n// block {{ facts.QUANT_BLOCK }}, flags {{ cuda_flags | length }}\n",
    "torch-ext/__module__/__init__.py.j2": '# {{ notice }}\n"""{{ module }} from {{ package.name }}."""\n',
    "csrc/cuda/quant_kernels.cu.j2": '// {{ notice }}\n#include "{{ cuda_units.quant.include }}"\n',
}
QUANT_VARIANTS = (
    'schema = 1\ntorch = ["2.14"]\n\n[[build]]\nbackend = "cuda"\ntoolkits = ["13.0"]\nsystems = ["x86_64-linux"]\n'
)


def with_quant_templates(root: Path) -> Path:
    for rel, text in QUANT_TEMPLATES.items():
        path = root / "templates" / "fixture-quant" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "variants").mkdir(exist_ok=True)
    (root / "variants" / "fixture-quant.toml").write_text(QUANT_VARIANTS)
    return root


@pytest.fixture
def synced(tmp_path: Path, up: FixtureRepo) -> Config:
    cfg = config.load(with_quant_templates(family(tmp_path, up)))
    execute(prepare(cfg, SyncRequest(rev="v1")))
    return cfg


def cli(cfg: Config, *args: str) -> Result:
    return runner.invoke(app, [*args, "-C", str(cfg.root)])


def test_render_plan_per_package(synced: Config) -> None:
    from toolkit import render

    quant = synced.for_package("fixture-quant")
    plan = render.plan(quant)
    assert plan.root == synced.root / "build" / "fixture-quant" / "src"
    by_path = plan.by_path()
    assert set(by_path) == {
        "build.toml",
        "torch-ext/torch_binding.cpp",
        "torch-ext/fixture_quant/__init__.py",
        "csrc/cuda/quant_kernels.cu",
        "torch-ext/registration.h",  # the tool's, as for every package
        "torch-ext/fixture_quant/_ops.py",
    }
    assert '#include "ggml-cuda/fattn.cu"' in by_path["csrc/cuda/quant_kernels.cu"].content  # the locked entry
    assert "from templates/fixture-quant/build.toml.j2" in by_path["build.toml"].content
    assert '"../../../vendor/ggml/include"' in by_path["build.toml"].content
    assert "from toolkit/data/package/torch-ext/registration.h.j2" in by_path["torch-ext/registration.h"].content
    assert "// block 32, flags 7" in by_path["torch-ext/torch_binding.cpp"].content  # own fact + shared fact
    # Each package renders its own templates only (and the tool's shared ones), into its own tree.
    first = render.plan(synced)
    assert first.root == synced.root / "build" / "fixture-kernels" / "src"
    assert {f.path for f in first.files} == {"torch-ext/registration.h", "torch-ext/fixture_kernels/_ops.py"}


def test_render_cli_filters_by_package(synced: Config) -> None:
    res = cli(synced, "render", "-p", "fixture-quant")
    assert res.exit_code == 0, res.output
    assert (synced.root / "build/fixture-quant/src/build.toml").is_file()
    assert "build/fixture-quant/src/csrc/cuda/quant_kernels.cu" in res.output
    assert not (synced.root / "build/fixture-kernels").exists() and not (synced.root / "torch-ext").exists()
    res = cli(synced, "render", "--check", "--package", "fixture-quant", "--json")
    assert res.exit_code == 0 and '"ok": true' in res.output
    res = cli(synced, "render", "--check", "--json")  # both: one document keyed by package
    assert res.exit_code == 0, res.output
    import json

    doc = json.loads(res.stdout)
    assert set(doc["packages"]) == {"fixture-kernels", "fixture-quant"}
    assert doc["packages"]["fixture-kernels"]["files"] == [  # the fixture's first package has only facts
        "build/fixture-kernels/src/torch-ext/fixture_kernels/_ops.py",
        "build/fixture-kernels/src/torch-ext/registration.h",
    ]
    res = cli(synced, "render", "-p", "fixture-qaunt")
    assert res.exit_code == 2 and "did you mean 'fixture-quant'" in res.output


def _unreproducible(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Make `package`'s torch_binding.cpp render differently every time (a template reading a clock would)."""
    from toolkit.render import stage

    real, count = stage.render_files, iter(range(10**6))

    def render_files(config: Config, lock: Lock | None, edition: int) -> tuple[RenderedFile, ...]:
        files = real(config, lock, edition)
        if config.name != package:
            return files
        return tuple(
            replace(f, content=f.content + f"// {next(count)}\n") if f.path.endswith("torch_binding.cpp") else f
            for f in files
        )

    monkeypatch.setattr(stage, "render_files", render_files)


def test_stale_second_package_names_itself(synced: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli(synced, "render", "-p", "fixture-quant").exit_code == 0
    target = synced.root / "build/fixture-quant/src/torch-ext/torch_binding.cpp"
    target.write_text(target.read_text() + "// hand edit\n")
    res = cli(synced, "render")  # the rendered tree is build output: render puts it back
    assert res.exit_code == 0 and "wrote    build/fixture-quant/src/torch-ext/torch_binding.cpp" in res.output
    assert cli(synced, "render", "--check").exit_code == 0
    _unreproducible(monkeypatch, "fixture-quant")
    res = cli(synced, "render", "--check")
    assert res.exit_code == 6, res.output
    assert (
        "package fixture-quant: generated files are not reproducible (two renders differ): "
        "build/fixture-quant/src/torch-ext/torch_binding.cpp" in res.output
    )


def test_build_plan_per_package_lands_under_build_package(synced: Config) -> None:
    import json

    assert cli(synced, "render", "-p", "fixture-quant").exit_code == 0
    res = cli(synced, "build", "--dry-run", "--json", "-p", "fixture-quant", "--all", "--no-provision")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    names = [v["name"] for v in plan["variants"]]
    assert names == ["torch214-cxx11-cu130-x86_64-linux"]
    assert plan["variants"][0]["out_dir"] == "build/fixture-quant/torch214-cxx11-cu130-x86_64-linux"  # project-relative
    assert plan["variants"][0]["id"].startswith("_fixture_quant_cuda_")
    quant = synced.for_package("fixture-quant")
    assert (quant.root / plan["variants"][0]["out_dir"]).resolve() == (
        quant.build_dir / "torch214-cxx11-cu130-x86_64-linux"
    ).resolve()


def test_verify_and_status_per_package(synced: Config) -> None:
    import json

    res = cli(synced, "verify", "--dry-run", "--json", "-p", "fixture-quant")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"dry_run": True, "variants": []}
    res = cli(synced, "status", "--json")
    assert json.loads(res.stdout)["packages"] == {
        "fixture-kernels": len(GDN_CUDA | FA_CUDA | SSM_CUDA | METAL),
        "fixture-quant": len(QUANT_CUDA),
    }


# --- init ------------------------------------------------------------------------------------------------


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_init_dry_run_writes_nothing(tmp_path: Path, up: FixtureRepo) -> None:
    root = make_project(tmp_path / "proj", str(up.path))
    before = tree(root)
    res = runner.invoke(
        app, ["init", "fixture-new", "--op", "quant=src/ggml-cuda/fattn.cu", "--dry-run", "-C", str(root)]
    )
    assert res.exit_code == 0, res.output
    assert "would add [tool.ggml-vendor.packages.fixture-new] to pyproject.toml" in res.output
    assert "would create templates/fixture-new/facts.py" in res.output
    assert "would create tests/packages/test_fixture_new.py" in res.output
    assert tree(root) == before


def test_init_adds_a_package_that_syncs_and_renders(tmp_path: Path, up: FixtureRepo) -> None:
    root = make_project(tmp_path / "proj", str(up.path))
    before = (root / "pyproject.toml").read_text()
    res = runner.invoke(
        app,
        [
            "init",
            "fixture-new",
            "--op",
            "quant=src/ggml-cuda/fattn.cu",
            "--op",
            "quant=metal:src/ggml-metal/ggml-metal.metal",
            "-C",
            str(root),
        ],
    )
    assert res.exit_code == 0, res.output
    after = (root / "pyproject.toml").read_text()
    assert after.startswith(before)  # appended: every comment and line of the old file kept
    assert "# a comment that must survive" in after
    cfg = config.load(root)
    new = cfg.for_package("fixture-new")
    assert (new.hub_repo, new.module, new.backends) == ("someone/fixture-new", "fixture_new", ("cuda", "metal"))
    assert [(op.name, sorted(op.entries)) for op in new.ops] == [("quant", ["cuda", "metal"])]
    assert (root / "templates/fixture-new/facts.py").is_file() and (
        root / "tests/packages/test_fixture_new.py"
    ).is_file()
    execute(prepare(cfg, SyncRequest(rev="v1")))
    assert set(locked(cfg.vendor_dir).package_files("fixture-new")) >= QUANT_CUDA
    res = runner.invoke(app, ["render", "-p", "fixture-new", "-C", str(root)])
    assert res.exit_code == 0, res.output
    unit = (root / "build/fixture-new/src/csrc/cuda/quant_kernels.cu").read_text()
    assert '#include "ggml-cuda/fattn.cu"' in unit
    binding = (root / "build/fixture-new/src/torch-ext/torch_binding.cpp").read_text()
    assert "quant: cuda src/ggml-cuda/fattn.cu; metal src/ggml-metal/ggml-metal.metal" in binding
    assert runner.invoke(app, ["render", "--check", "-p", "fixture-new", "-C", str(root)]).exit_code == 0
    # The test init wrote passes in the new project, and fails once the op is gone from the binding.
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/packages/test_fixture_new.py"]
    ok = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    template = root / "templates/fixture-new/torch-ext/torch_binding.cpp.j2"
    template.write_text(
        template.read_text().replace("{%- for op in ops %}", "{%- for op in [] %}").replace("{{ op }}:", "-")
    )
    bad = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1, bad.stdout + bad.stderr


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["fixture-kernels", "--op", "quant=src/x.cu"], "already exists"),
        (["Bad_Name", "--op", "quant=src/x.cu"], "not a valid kernel name"),
        (["g" * 300, "--op", "quant=src/x.cu"], "not a valid kernel name"),
        (["fixture-new"], "at least one --op"),
        (["fixture-new", "--op", "quant=vulkan:src/x.cu"], "unknown backend 'vulkan'"),
        (["fixture-new", "--op", "quant=../x.cu"], "not a relative path"),
        (["fixture-new", "--op", "quant=src/x.cu", "--hub-repo", "someone/fixture-kernels"], "share the Hub repo"),
    ],
)
def test_init_refusals_are_one_line_exit_2_and_write_nothing(
    tmp_path: Path, up: FixtureRepo, args: list[str], match: str
) -> None:
    root = make_project(tmp_path / "proj", str(up.path))
    before = tree(root)
    res = runner.invoke(app, ["init", *args, "-C", str(root)])
    assert res.exit_code == 2, res.output
    assert match in res.output
    assert tree(root) == before


def test_init_refuses_a_dangling_link_and_a_way_out_of_the_project(tmp_path: Path, up: FixtureRepo) -> None:
    root = make_project(tmp_path / "proj", str(up.path))
    (root / "templates" / "fixture-new").symlink_to(tmp_path / "nowhere")  # dangling
    before = tree(root)
    res = runner.invoke(app, ["init", "fixture-new", "--op", "quant=src/x.cu", "-C", str(root)])
    assert res.exit_code == 2 and "outside the project" in res.output, res.output  # a link that leaves it
    assert tree(root) == before
    (root / "templates" / "fixture-new").unlink()
    (tmp_path / "elsewhere").mkdir()
    (root / "tests").mkdir()
    (root / "tests" / "packages").symlink_to(tmp_path / "elsewhere")
    before = tree(root)
    res = runner.invoke(app, ["init", "fixture-new", "--op", "quant=src/x.cu", "-C", str(root)])
    assert res.exit_code == 2 and "outside the project" in res.output, res.output
    assert tree(root) == before and not any((tmp_path / "elsewhere").iterdir())


@pytest.mark.parametrize("lands", ["while printing", "before pyproject.toml", "during the roll-back"])
def test_a_ctrl_c_of_init_says_whether_the_package_was_added_read_back(
    tmp_path: Path, up: FixtureRepo, monkeypatch: pytest.MonkeyPatch, lands: str
) -> None:
    """Issue 33 item 3: a Ctrl-C once init's plan is made says what the project holds, read back from disk:
    the package added (the report's printing cut short), or not added and nothing of it left."""
    from toolkit import init as init_stage
    from toolkit.core import fs

    root = make_project(tmp_path / "proj", str(up.path))
    before = tree(root)
    real_write = fs.atomic_write

    def ctrl_c_at_pyproject(path, data):  # type: ignore[no-untyped-def]
        if path.name == "pyproject.toml":
            if lands == "during the roll-back":  # a second Ctrl-C hits the roll-back: it is not cut short
                import os
                import signal

                monkeypatch.setattr(init_stage, "_pyproject_is_new", lambda _p: os.kill(os.getpid(), signal.SIGINT))
            raise KeyboardInterrupt
        real_write(path, data)

    if lands == "while printing":
        monkeypatch.setattr(init_stage.InitReport, "lines", lambda _self: (_ for _ in ()).throw(KeyboardInterrupt()))
    else:
        monkeypatch.setattr(fs, "atomic_write", ctrl_c_at_pyproject)
    res = runner.invoke(app, ["init", "fixture-new", "--op", "quant=src/ggml-cuda/fattn.cu", "-C", str(root)])
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]
    assert last.startswith("interrupted:"), res.output
    if lands == "while printing":
        assert "package fixture-new was added: pyproject.toml declares it" in last, res.output
        assert "(read back from disk) — nothing to undo" in last, res.output
        assert "fixture-new" in config.load(root).package_names()
    else:
        expected = "package fixture-new was not added: pyproject.toml is as it was and none of its files were left"
        assert expected in last, res.output
        assert tree(root) == before


# --- the demo on a family -----------------------------------------------------------------------------------


def test_demo_workspace_keeps_what_the_miniature_serves(tmp_path: Path, repo_root: Path) -> None:
    from toolkit.demo.workspace import make_workspace, missing_in_miniature

    src = demo_family_source(tmp_path, repo_root)
    absent = config.load(src).for_package("absent-quant").package
    assert missing_in_miniature(absent) == ["src/ggml-cuda/not-in-the-miniature.cu"]
    cfg = config.load(make_workspace(src, tmp_path / "ws"))
    assert cfg.package_names() == ("ggml-attn-kernels", "mini-quant")
    assert cfg.for_package("mini-quant").hub_repo == "ggml-demo/mini-quant"
    assert cfg.hub_repo == "ggml-demo/ggml-attn-kernels"


def test_demo_reports_a_skipped_package_and_runs_the_others(tmp_path: Path, repo_root: Path) -> None:
    from toolkit.demo import run_demo

    src = demo_family_source(tmp_path, repo_root)  # no templates/: the first package's render fails
    report = run_demo(src, workspace=tmp_path / "ws")
    status = {s.name: (s.status, s.detail) for s in report.stages}
    names = [s.name for s in report.stages]
    assert names[:3] == ["setup", "absent-quant", "sync"]
    assert status["absent-quant"][0] == "skipped"
    assert "src/ggml-cuda/not-in-the-miniature.cu are not in the embedded miniature" in status["absent-quant"][1]
    assert status["sync"][0] == "ok" and status["render ggml-attn-kernels"][0] == "failed"
    assert "render mini-quant" in names and status["get_kernel mini-quant"][0] == "skipped"
    assert not report.ok


def test_a_package_names_its_own_conformance_cases(synced: Config) -> None:
    from toolkit.verify import conformance

    # the first package's GDN/FA cases live with it (templates/<name>/conformance.py), not in the tool
    assert conformance.cases_file_of(synced) == synced.root / "templates/fixture-kernels/conformance.py"
    quant = synced.for_package("fixture-quant")
    assert conformance.cases_file_of(quant) is None  # a package that declares none: the gate says so
    facts = synced.root / "templates/fixture-quant/facts.py"
    facts.write_text(facts.read_text() + 'CONFORMANCE = "conformance.py"\n')
    quant = synced.for_package("fixture-quant")
    assert conformance.cases_file_of(quant) == synced.root / "templates/fixture-quant/conformance.py"
    compile(conformance._CHILD, "<conformance child>", "exec")  # the child that loads it parses


def test_json_of_several_packages_keeps_the_failing_one(synced: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    assert cli(synced, "render", "-p", "fixture-quant").exit_code == 0
    _unreproducible(monkeypatch, "fixture-quant")
    res = cli(synced, "render", "--check", "--json")
    assert res.exit_code == 6
    doc = json.loads(res.stdout)
    assert doc["packages"]["fixture-kernels"]["ok"] is True
    assert doc["packages"]["fixture-quant"]["drift"] == [
        {"path": "build/fixture-quant/src/torch-ext/torch_binding.cpp", "kind": "unreproducible"}
    ]


# --- verify and publish of a later package ----------------------------------------------------------------

PUBLISHED_SECOND = """
[tool.ggml-vendor.packages.fixture-quant]
version = 2
hub-repo = "ggml-test/fixture-quant"
backends = ["cuda"]

[tool.ggml-vendor.packages.fixture-quant.ops.quant]
cuda = ["src/ggml-cuda/fattn.cu"]
"""


def test_a_later_package_verifies_and_publishes_to_its_own_repo(tmp_path: Path) -> None:
    import json

    from tests.helpers.hubserver import HubServer, HubState
    from tests.helpers.hubserver.variants import make_variant, write_lock, write_project
    from toolkit.verify import VerifyOptions, verify_build

    root = write_project(tmp_path / "proj", hub_repo="ggml-test/ggml-attn-kernels")
    with (root / "pyproject.toml").open("a") as fh:
        fh.write(PUBLISHED_SECOND)
    write_lock(root)
    facts = root / "templates" / "fixture-quant" / "facts.py"
    facts.parent.mkdir(parents=True)
    facts.write_text(QUANT_TEMPLATES["facts.py"])
    assert runner.invoke(app, ["render", "-p", "fixture-quant", "-C", str(root)]).exit_code == 0  # published beside
    quant = config.load(root).for_package("fixture-quant")
    make_variant(quant.build_dir, name="fixture-quant", module="fixture_quant", version=2)
    assert verify_build(quant, options=VerifyOptions(check_vendor=False, smoke=False)).ok
    assert (root / "build/fixture-quant/.verified.json").is_file() and not (root / "build/.verified.json").exists()
    with HubServer(HubState(tokens=("hf_test_token",))) as hub:
        args = ["publish", "-p", "fixture-quant", "--endpoint", hub.url, "--token", "hf_test_token", "--json"]
        res = runner.invoke(app, [*args, "--dry-run", "-C", str(root)])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert doc["status"] == "dry-run" and "ggml-test/fixture-quant" in json.dumps(doc)
        res = runner.invoke(app, [*args, "-C", str(root)])
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        assert doc["status"] == "published", doc
        assert "ggml-test/fixture-quant" in doc["target"] and "v2" in json.dumps(doc)
        assert (root / "build/fixture-quant/publish-report.json").is_file()
        assert "torch-ext/registration.h" in json.dumps(doc)  # the rendered source rides beside the variants
        res = runner.invoke(app, ["publish", "--repo", "x/y", "--endpoint", hub.url, "-C", str(root)])
        assert res.exit_code == 2 and "several packages are selected" in res.output


def test_a_later_package_entry_missing_at_the_pin_names_its_table(tmp_path: Path, up: FixtureRepo) -> None:
    root = edited(tmp_path, up, 'cuda = ["src/ggml-cuda/fattn.cu"]', 'cuda = ["src/ggml-cuda/no-such.cu"]')
    res = runner.invoke(app, ["sync", "--rev", "v1", "-C", str(root)])
    assert res.exit_code == 3, res.output
    assert "entry file of fixture-quant:quant/cuda not found" in res.output
    assert "[tool.ggml-vendor.packages.fixture-quant.ops.quant]" in res.output
    assert not (root / "vendor" / "UPSTREAM").exists()  # nothing half written


# --- build identity (uid) per package ---------------------------------------------------------------------


# The fixture's first package has no templates: its rendered tree is written as it would be.
FIRST_BUILD_TOML = """[general]
name = "fixture-kernels"
version = 1
edition = 5
license = "MIT"
backends = ["cuda"]

[torch]
src = ["torch-ext/torch_binding.cpp"]

[kernel.gdn]
backend = "cuda"
depends = []
src = ["csrc/gdn.cu"]
include = ["../../../vendor/ggml/include", "../../../vendor/ggml/src", "../../../vendor/ggml/src/ggml-cuda"]
cuda-capabilities = ["8.0"]
"""


def _first_rendered(root: Path) -> Path:
    assert runner.invoke(app, ["render", "-p", "fixture-kernels", "-C", str(root)]).exit_code == 0  # the tool's files
    src = root / "build" / "fixture-kernels" / "src"
    (src / "build.toml").write_text(FIRST_BUILD_TOML)
    for rel, text in (
        ("torch-ext/torch_binding.cpp", "// binding\n"),
        ("torch-ext/fixture_kernels/__init__.py", "\n"),
        ("csrc/gdn.cu", '#include "ggml-cuda/gated_delta_net.cu"\n'),
    ):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return root


def _uid(cfg: Config) -> str:
    from toolkit.build.inputs import load_project

    return load_project(cfg, store=False).source_id


def test_each_package_uid_hashes_its_own_closure_and_the_first_keeps_its_one_package_value(
    synced: Config, tmp_path: Path, up: FixtureRepo
) -> None:
    assert cli(synced, "render", "-p", "fixture-quant").exit_code == 0
    _first_rendered(synced.root)
    quant = synced.for_package("fixture-quant")
    first, second = _uid(synced), _uid(quant)
    # The first package's uid is the one a project of that package alone gets for the same pin: the family's
    # lock enters it as the first package's view (the one-package lock's bytes), and the second package's
    # vendored files not at all.
    alone = make_project(tmp_path / "alone", str(up.path))
    execute(prepare(config.load(alone), SyncRequest(rev="v1")))
    assert _uid(config.load(_first_rendered(alone))) == first
    vendored = synced.root / "vendor" / "ggml"
    only_second = vendored / "src/ggml-cuda/fattn-mma.cuh"  # QUANT_ONLY: needed by fixture-quant alone
    only_second.write_text(only_second.read_text() + "// edited\n")
    assert (_uid(synced), _uid(quant) != second) == (first, True)
    second = _uid(quant)
    only_first = vendored / "src/ggml-cuda/gated_delta_net.cu"  # the first package's GDN closure only
    only_first.write_text(only_first.read_text() + "// edited\n")
    assert (_uid(synced) != first, _uid(quant)) == (True, second)
    shared = vendored / "src/ggml-cuda/fattn-common.cuh"  # in both closures
    shared.write_text(shared.read_text() + "// edited\n")
    assert _uid(synced) != first and _uid(quant) != second


def test_a_later_package_stages_its_own_kernel_builder_tree(synced: Config, tmp_path: Path) -> None:
    # The nix executor hands kernel-builder one package's tree with a flake of its own: every package's
    # rendered tree (build/<name>/src/) reaches vendor/ as ../../../vendor, so the staged copy holds vendor/ beside
    # build.toml and the build.toml's paths are rewritten to it.
    from toolkit.build.nix import COPIED, NixPlan, _stage_project, render_flake, vendor_of

    assert cli(synced, "render", "-p", "fixture-quant").exit_code == 0
    quant = synced.for_package("fixture-quant")
    assert vendor_of(synced.package_root) == vendor_of(quant.package_root) == "../../../vendor"
    stage = tmp_path / "stage"
    stage.mkdir()
    plan = NixPlan(render_flake(quant.name), ("nix",), COPIED, vendor_of(quant.package_root))
    _stage_project(quant.package_root, stage, plan)
    assert (stage / "vendor/ggml/src/ggml-cuda/fattn.cu").is_file() and (stage / "vendor/UPSTREAM").is_file()
    text = (stage / "build.toml").read_text()
    assert '"vendor/ggml/include"' in text and "../vendor" not in text
    assert (stage / "torch-ext/torch_binding.cpp").is_file() and (stage / "csrc/cuda/quant_kernels.cu").is_file()
    assert 'description = "fixture-quant: ' in (stage / "flake.nix").read_text()
