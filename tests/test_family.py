"""A family of kernel packages in one project: config, one pin's union closure, per-package stages, `init`.

The fixture project declares the fixture ops as its first package and a second package (`fixture-quant`)
whose one op enters the miniature upstream through src/ggml-cuda/fattn.cu: it shares most of its closure
with the first package's flash_attn and adds two files of its own, so the union has something to dedupe
and something only the second package needs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixture_repos import FA_CUDA, GDN_CUDA, METAL, build_upstream, make_project
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.core import config
from toolkit.core.errors import ConfigError
from toolkit.core.lock import read_lock
from toolkit.sync.closure import compute_closure
from toolkit.sync.stage import SyncRequest, execute, prepare

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


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    return build_upstream(tmp_path_factory.mktemp("upstream") / "ggml", "ggml")


@pytest.fixture(autouse=True)
def _cache(isolated_upstream_cache):  # type: ignore[no-untyped-def]
    return isolated_upstream_cache


def family(tmp_path: Path, up, extra: str = SECOND) -> Path:  # type: ignore[no-untyped-def]
    root = make_project(tmp_path / "proj", str(up.path))
    with (root / "pyproject.toml").open("a") as fh:
        fh.write(extra)
    return root


def edited(tmp_path: Path, up, old: str, new: str) -> Path:  # type: ignore[no-untyped-def]
    root = family(tmp_path, up)
    text = (root / "pyproject.toml").read_text()
    assert old in text, old
    (root / "pyproject.toml").write_text(text.replace(old, new, 1))
    return root


# --- config --------------------------------------------------------------------------------------------


def test_packages_load_in_order_with_defaults(tmp_path, up):
    cfg = config.load(family(tmp_path, up))
    assert [p.name for p in cfg.packages] == ["fixture-kernels", "fixture-quant"]
    first, second = cfg.packages
    assert first.first and (first.templates, first.root, first.variants) == ("templates", ".", "variants/default.toml")
    assert not second.first
    assert cfg.name == "fixture-kernels" and cfg.package_root == cfg.root and cfg.build_dir == cfg.root / "build"
    quant = cfg.for_package("fixture-quant")
    assert (quant.name, quant.version, quant.hub_repo, quant.module) == (
        "fixture-quant",
        2,
        "someone/fixture-quant",
        "fixture_quant",
    )
    assert quant.package_root == cfg.root / "packages/fixture-quant"
    assert quant.templates_dir == cfg.root / "templates/fixture-quant"
    assert quant.variants_file == cfg.root / "variants/fixture-quant.toml"
    assert quant.build_dir == cfg.root / "build" / "fixture-quant"
    assert quant.backends == ("cuda",) and [op.name for op in quant.ops] == ["quant"]
    assert quant.license == cfg.license and quant.upstream == cfg.upstream and quant.vendor_dir == cfg.vendor_dir
    assert second.key("quant") == "fixture-quant:quant" and first.key("flash_attn") == "flash_attn"


def test_selected_filters_and_names_the_nearest(tmp_path, up):
    cfg = config.load(family(tmp_path, up))
    assert [c.name for c in cfg.selected(())] == ["fixture-kernels", "fixture-quant"]
    assert [c.name for c in cfg.selected(["fixture-quant"])] == ["fixture-quant"]
    with pytest.raises(ConfigError, match=r"no package 'fixture-qant'.*did you mean 'fixture-quant'"):
        cfg.selected(["fixture-qant"])


def test_all_entries_is_every_package_with_qualified_keys(tmp_path, up):
    cfg = config.load(family(tmp_path, up))
    keys = [(k, b) for k, b, _ in cfg.all_entries()]
    assert keys == [
        ("gated_delta_net", "cuda"),
        ("gated_delta_net", "metal"),
        ("flash_attn", "cuda"),
        ("flash_attn", "metal"),
        ("fixture-quant:quant", "cuda"),
    ]
    assert [(k, b) for k, b, _ in cfg.all_entries(("metal",))] == [
        ("gated_delta_net", "metal"),
        ("flash_attn", "metal"),
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
        ('backends = ["cuda"]\n', 'backends = ["cuda"]\nroot = "../out"\n', "path inside the project"),
    ],
)
def test_bad_package_config_is_one_line_exit_2(tmp_path, up, old, new, match):
    root = edited(tmp_path, up, old, new)
    with pytest.raises(ConfigError, match=match):
        config.load(root)
    res = runner.invoke(app, ["render", "--check", "-C", str(root)])
    assert res.exit_code == 2, res.output
    assert len([line for line in res.output.splitlines() if line.strip()]) <= 3, res.output  # one error, wrapped


def test_unknown_shared_key_names_the_nearest(tmp_path, up):
    root = edited(tmp_path, up, 'license = "MIT"', 'license = "MIT"\ncuda-arch = ["9.0"]')
    with pytest.raises(ConfigError, match=r"unknown key 'cuda-arch' \(did you mean 'cuda-archs'\?\)"):
        config.load(root)


def test_package_named_like_the_first_is_refused(tmp_path, up):
    root = family(tmp_path, up, SECOND.replace("fixture-quant", "fixture-kernels"))
    with pytest.raises(ConfigError, match="declared twice"):
        config.load(root)


# --- one pin: the union closure ------------------------------------------------------------------------


def test_union_closure_vendors_each_file_once_and_records_who_needs_it(tmp_path, up):
    cfg = config.load(family(tmp_path, up))
    prep = prepare(cfg, SyncRequest(rev="v1"))
    closure = prep.plan.closure
    assert len(closure.files) == len(set(closure.files))
    assert set(closure.files) == GDN_CUDA | FA_CUDA | METAL | QUANT_ONLY
    assert set(closure.for_op("fixture-quant:quant", "cuda").files) == QUANT_CUDA
    assert closure.needed_by["src/ggml-cuda/fattn-mma.cuh"] == ("fixture-quant:quant/cuda",)
    assert closure.needed_by["src/ggml-cuda/fattn-common.cuh"] == ("fixture-quant:quant/cuda", "flash_attn/cuda")
    execute(prep)
    lock = read_lock(cfg.vendor_dir)
    assert lock is not None
    assert dict(lock.packages) == {
        "fixture-kernels": ("gated_delta_net", "flash_attn"),
        "fixture-quant": ("fixture-quant:quant",),
    }
    assert set(lock.package_files("fixture-quant")) == QUANT_CUDA
    assert set(lock.package_files("fixture-kernels")) == GDN_CUDA | FA_CUDA | METAL
    vendored = {p.relative_to(cfg.vendor_dir / "ggml").as_posix() for p in (cfg.vendor_dir / "ggml").rglob("*")}
    assert QUANT_ONLY <= vendored
    assert '[packages."fixture-quant"]' in (cfg.vendor_dir / "UPSTREAM").read_text()


def test_one_package_lock_has_no_package_table(tmp_path, up):
    cfg = config.load(make_project(tmp_path / "one", str(up.path)))
    execute(prepare(cfg, SyncRequest(rev="v1")))
    assert "[packages." not in (cfg.vendor_dir / "UPSTREAM").read_text()
    assert read_lock(cfg.vendor_dir).packages == {}


def test_union_closure_is_pure_over_a_reader():
    files = {
        "a.cu": b'#include "common.h"\n#include "only_a.h"\n',
        "b.cu": b'#include "common.h"\n',
        "common.h": b"#pragma once\n",
        "only_a.h": b"#pragma once\n",
    }
    entries = [(k, "cuda", config.Entry((p,))) for k, p in (("a", "a.cu"), ("pkg:b", "b.cu"))]
    closure = compute_closure(entries, files.get, roots=())
    assert closure.files == ("a.cu", "b.cu", "common.h", "only_a.h")
    assert closure.needed_by["common.h"] == ("a/cuda", "pkg:b/cuda")
    assert closure.needed_by["only_a.h"] == ("a/cuda",)
