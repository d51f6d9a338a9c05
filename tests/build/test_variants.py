"""The matrix as data: parsing, variant names (checked against kernels' own parser), selection, and the
per-host status rules — all without nvcc, hipcc, Xcode or a second torch (HostFacts are constructed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers import copy_build_kernel
from toolkit.build.envs import HostFacts, Toolkit
from toolkit.build.host_status import Status, pick_toolkit, status
from toolkit.build.matrix import Matrix, Variant, load_matrix, parse_matrix, parse_name
from toolkit.build.torchenvs import TorchEnv
from toolkit.build.torchtree import read_torch_version
from toolkit.core.errors import ConfigError
from toolkit.core.kernels_client import parse_variant

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "variants" / "ggml-attn-kernels.toml"


def _names(path: Path = DEFAULT) -> set[str]:
    return {v.name for v in load_matrix(path).variants}


def test_default_matrix_is_kernel_builders_required_set_plus_pypis_current_torch() -> None:
    expected = (
        {
            f"torch{t}-cxx11-cu{c}-{cpu}-linux"
            for t in ("213", "214")
            for c in ("126", "130", "132")
            for cpu in ("x86_64", "aarch64")
        }
        | {"torch213-metal-aarch64-darwin", "torch214-metal-aarch64-darwin", "torch215-metal-aarch64-darwin"}
        | {
            "torch213-cxx11-rocm71-x86_64-linux",
            "torch213-cxx11-rocm72-x86_64-linux",
            "torch214-cxx11-rocm72-x86_64-linux",
        }
        # torch 2.15.0 on PyPI is built for CUDA 13.2 only: what `pip install torch` gives Hub users today
        | {"torch215-cxx11-cu132-x86_64-linux", "torch215-cxx11-cu132-aarch64-linux"}
    )
    assert _names() == expected


def test_names_parse_back_and_agree_with_kernels_parser() -> None:
    pytest.importorskip("kernels", reason="kernels is not installed: the client's own parser cannot be asked")
    for v in load_matrix(DEFAULT).variants:
        assert parse_name(v.name) == v
        parsed = parse_variant(v.name)  # the installed client's reading (0.17, 0.18 or 0.19 layout)
        framework = "torch-stable-abi" if v.stable else "torch"
        assert parsed.is_arch and parsed.framework == framework, (v.name, parsed)
        assert parsed.backend == v.backend and parsed.os == v.os, (v.name, parsed)
        assert parsed.framework_version == v.torch and parsed.backend_version == (v.toolkit or None), (v.name, parsed)
        # -cxx11 on Linux only (docs/hub-contract.md §2.1)
        # (stable-ABI names carry none: every client refuses -cxx11 after torch-stable-abi<MM>)
        assert ("-cxx11-" in v.name) == (v.os == "linux" and not v.stable)


@pytest.mark.parametrize(
    "bad",
    [
        "torch214-cu130-x86_64-linux",
        "torch214-cxx11-metal-aarch64-darwin",
        "torch214-cxx11-cu130-riscv-linux",
        "torch-cuda",
    ],
)
def test_parse_name_rejects_names_outside_the_grammar(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_name(bad)


def _matrix(text: str) -> Matrix:
    return parse_matrix(text, Path("m.toml"))


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('torch=["2.14"]\n[[build]]\nbackend="opencl"\nsystems=["x86_64-linux"]', "backend"),
        ('torch=["2.14"]\n[[build]]\nbackend="cuda"\ntoolkits=["13"]\nsystems=["x86_64-linux"]', "MAJOR.MINOR"),
        ('torch=["2.14"]\n[[build]]\nbackend="metal"\nsystems=["x86_64-linux"]', "aarch64-darwin"),
        ('torch=["2.14"]\n[[build]]\nbackend="metal"\ntoolkits=["1.0"]\nsystems=["aarch64-darwin"]', "no toolkits"),
        (
            'torch=["2.14"]\n[[build]]\nbackend="cuda"\ntoolkits=["13.0"]\nsystems=["x86_64-linux"]\ncolour="red"',
            "unknown key",
        ),
        ('torch=["2.14"]\n[[build]]\nbackend="cuda"\nsystems=["x86_64-linux"]', "toolkits"),
        ('torch=["2.14"]', "no [[build]]"),
        ("torch=[", "not valid TOML"),
    ],
)
def test_bad_matrix_is_one_clear_error(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _matrix(text)
    assert fragment in str(exc.value)


def test_row_torch_overrides_default_and_duplicates_collapse() -> None:
    m = _matrix(
        'torch=["2.13","2.14"]\n'
        '[[build]]\nbackend="cuda"\ntoolkits=["13.0"]\nsystems=["x86_64-linux"]\n'
        '[[build]]\nbackend="cuda"\ntorch=["2.14"]\ntoolkits=["13.0"]\nsystems=["x86_64-linux"]\n'
    )
    assert [v.name for v in m.variants] == ["torch213-cxx11-cu130-x86_64-linux", "torch214-cxx11-cu130-x86_64-linux"]


def test_select_by_glob_and_unknown_glob_is_an_error() -> None:
    m = load_matrix(DEFAULT)
    sel = m.select(["torch214-*-x86_64-linux"])
    assert {v.name for v in sel} == {
        "torch214-cxx11-cu126-x86_64-linux",
        "torch214-cxx11-cu130-x86_64-linux",
        "torch214-cxx11-cu132-x86_64-linux",
        "torch214-cxx11-rocm72-x86_64-linux",
    }
    assert m.select([]) == m.variants
    with pytest.raises(ConfigError, match="matches no variant"):
        m.select(["torch299-*"])


def test_torch_index_is_per_backend_with_compute_substituted(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text(
        '[torch-index]\ncuda = "https://idx.example/{compute}"\n[[build]]\nbackend = "cuda"\n'
        'torch = ["2.13"]\ntoolkits = ["12.6"]\nsystems = ["x86_64-linux"]\n'
    )
    assert load_matrix(f).index_for(parse_name("torch213-cxx11-cu126-x86_64-linux")) == "https://idx.example/cu126"


def test_default_sources_are_pypi_pairs_with_no_url() -> None:
    m = load_matrix(DEFAULT)
    # PyPI is pip's default index: no URL is written for it (only the PyTorch index, for the rows PyPI lacks)
    assert all("pypi" not in url for url in re.findall(r"https?://[^\"\s]+", DEFAULT.read_text()))
    src = m.torch_source(parse_name("torch213-cxx11-cu130-x86_64-linux"))
    assert src is not None
    assert (src.package, src.version, src.index) == ("torch", "2.13.0", "pypi")
    src215 = m.torch_source(parse_name("torch215-cxx11-cu132-aarch64-linux"))
    assert src215 is not None and src215.version == "2.15.0"
    assert m.torch_source(parse_name("torch213-cxx11-cu126-x86_64-linux")) is None  # not on PyPI
    tk = m.toolkit_source(parse_name("torch214-cxx11-cu132-x86_64-linux"))
    assert tk is not None
    assert (tk.package, tk.version) == ("cuda-toolkit[nvcc,cccl,cudart]", "13.2.2")
    assert m.toolkit_source(parse_name("torch214-cxx11-cu126-x86_64-linux")) is None  # no nvcc wheel for 12.x
    assert m.index_for(parse_name("torch213-cxx11-cu126-x86_64-linux")).endswith("/cu126")  # [torch-index]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ('[sources.torch]\n"2.13-cu130" = { version = "2.14.1" }', "does not belong to 2.13"),
        ('[sources.torch]\n"2.13" = { version = "2.13.0" }', "key is not"),
        ('[sources.torch]\n"2.13-cu130" = { version = "2.13.*" }', "not an exact release"),
        ('[sources.toolkit]\n"hip-7.2" = { version = "7.2.0" }', "<backend>-<MAJOR.MINOR>"),
        ("[sources.wheels]\nx = 1", "unknown key 'wheels'"),
    ],
)
def test_bad_sources_are_one_clear_error(tmp_path: Path, body: str, fragment: str) -> None:
    f = tmp_path / "m.toml"
    f.write_text(
        '[[build]]\nbackend = "cuda"\ntoolkits = ["13.0"]\ntorch = ["2.13"]\nsystems = ["x86_64-linux"]\n' + body
    )
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_matrix(f)


def test_metal_torch_comes_from_pypi_without_a_url() -> None:
    m = load_matrix(DEFAULT)
    metal = parse_name("torch214-metal-aarch64-darwin")
    assert "metal" not in m.torch_index and m.index_for(metal) == "PyPI"
    mac = HostFacts(os="darwin", cpu="aarch64", metal=True, cxx="/usr/bin/clang++")
    st = status(metal, mac, enabled_backends=("metal",), index=None)
    assert not st.buildable and "needs torch 2.14" in st.reason and "pip's default index" in st.reason
    st = status(metal, mac, enabled_backends=("metal",), index="PyPI", torch_source=m.torch_source(metal))
    assert st.provision and "torch 2.14.1 (metal) from PyPI" in st.reason


# --- status rules ----------------------------------------------------------------------------------------

NVCC130 = Toolkit("cuda", "13.0", "/cuda-13.0", "/cuda-13.0/bin/nvcc", "13.0.88", ("sm_80", "sm_90"))
TORCH214 = TorchEnv("/py", "2.14.1+cu130", "/site/torch", cuda="13.0")
HOST = HostFacts(os="linux", cpu="x86_64", toolkits=(NVCC130,), envs=(TORCH214,), cxx="/usr/bin/g++")
ENABLED = ("cuda", "metal", "rocm")


def _status(name: str, host: HostFacts = HOST, enabled: tuple[str, ...] = ENABLED, engine: str = "auto") -> Status:
    return status(
        parse_name(name), host, enabled_backends=enabled, index="https://idx/{c}".format(c="x"), engine=engine
    )


def test_host_variant_is_buildable_locally_with_its_toolkit_and_env() -> None:
    st = _status("torch214-cxx11-cu130-x86_64-linux")
    assert st.buildable and st.executor == "local" and st.toolkit == NVCC130 and st.env == TORCH214


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("torch214-metal-aarch64-darwin", "needs macOS"),
        ("torch214-cxx11-cu130-aarch64-linux", "needs an aarch64 host"),
        ("torch214-cxx11-rocm72-x86_64-linux", "needs ROCm 7.2"),
        ("torch214-cxx11-cu126-x86_64-linux", "needs a CUDA toolkit 12.0-12.6"),
        ("torch213-cxx11-cu130-x86_64-linux", "needs torch 2.13 for CUDA 13.0 from https://idx/x"),
    ],
)
def test_each_unbuildable_variant_says_exactly_why(name: str, fragment: str) -> None:
    st = _status(name)
    assert not st.buildable and fragment in st.reason, st.reason


def test_cu132_with_nvcc_130_needs_a_cu132_torch_not_a_new_toolkit() -> None:
    # nvcc 13.0 can build cu132 (same major, older minor), so the missing piece reported is the torch build.
    st = _status("torch214-cxx11-cu132-x86_64-linux")
    assert not st.buildable and "needs torch 2.14 for CUDA 13.2" in st.reason
    host = HostFacts("linux", "x86_64", (NVCC130,), (TORCH214, TorchEnv("/p2", "2.14.0+cu132", "/t2", cuda="13.2")))
    st = _status("torch214-cxx11-cu132-x86_64-linux", host)
    assert st.buildable and st.toolkit == NVCC130 and st.env is not None and st.env.cuda == "13.2"


def test_toolkit_choice_prefers_exact_minor_and_never_a_newer_one() -> None:
    t126 = Toolkit("cuda", "12.6", "/c126", "/c126/bin/nvcc")
    t128 = Toolkit("cuda", "12.8", "/c128", "/c128/bin/nvcc")
    t132 = Toolkit("cuda", "13.2", "/c132", "/c132/bin/nvcc")
    tks = (t126, t128, NVCC130, t132)
    assert pick_toolkit(parse_name("torch214-cxx11-cu126-x86_64-linux"), tks) == t126
    assert pick_toolkit(parse_name("torch214-cxx11-cu130-x86_64-linux"), tks) == NVCC130
    assert pick_toolkit(parse_name("torch214-cxx11-cu132-x86_64-linux"), tks) == t132
    assert pick_toolkit(parse_name("torch214-cxx11-cu130-x86_64-linux"), (t132,)) is None


def test_disabled_backend_is_reported_before_anything_else() -> None:
    st = _status("torch214-metal-aarch64-darwin", enabled=("cuda",))
    assert not st.buildable and "backend metal is not enabled" in st.reason


def test_nix_builds_every_variant_of_the_host_system_only_when_asked_for() -> None:
    host = HostFacts("linux", "x86_64", (), (), nix="/nix/bin/nix")
    assert _status("torch213-cxx11-cu126-x86_64-linux", host, engine="nix").executor == "nix"
    assert not _status("torch213-cxx11-cu126-aarch64-linux", host, engine="nix").buildable
    # a nix on PATH is not used unless asked for
    assert _status("torch213-cxx11-cu126-x86_64-linux", host).executor != "nix"


def test_torch_version_is_read_without_importing_torch(tmp_path: Path) -> None:
    (tmp_path / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.13.0+cu126'\ncuda: Optional[str] = '12.6'\nhip: Optional[str] = None\n"
    )
    assert read_torch_version(tmp_path) == ("2.13.0+cu126", "12.6", None)
    env = TorchEnv("/p", "2.13.0+cu126", str(tmp_path), cuda="12.6")
    assert (env.torch_minor, env.compute) == ("2.13", "cu126")


# --- the command ------------------------------------------------------------------------------------------


def test_variants_command_lists_the_whole_matrix_with_statuses() -> None:
    from toolkit.cli import app

    res = CliRunner().invoke(app, ["variants", "-C", str(REPO), "-p", "ggml-attn-kernels", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = {r["name"]: r for r in doc["variants"]}
    assert set(rows) == _names()
    for r in rows.values():
        assert r["buildable"] or r["reason"], r  # every skipped variant carries its reason
        # ... and every row names the engine that builds it
        if r["buildable"]:
            assert r["engine"].startswith("local"), r
        elif r["provision"]:
            assert r["engine"].startswith("local, after provisioning"), r
        else:
            assert r["engine"].startswith(("github-actions ", "nix")), r
    assert rows["torch214-metal-aarch64-darwin"]["engine"].startswith("github-actions macos")
    arm = rows["torch214-cxx11-cu130-aarch64-linux"]["engine"]
    assert arm.startswith("github-actions ubuntu-24.04-arm") or "cross-built" in arm, arm
    assert (
        "macOS" in rows["torch214-metal-aarch64-darwin"]["reason"]
        or "not enabled" in rows["torch214-metal-aarch64-darwin"]["reason"]
    )


def test_variants_command_bad_glob_exits_with_config_error() -> None:
    from toolkit.cli import app

    res = CliRunner().invoke(app, ["variants", "-C", str(REPO), "--variant", "nope*"])
    assert res.exit_code == 2
    assert "matches no variant" in res.output


def test_variant_name_property_examples() -> None:
    assert Variant("2.14", "cuda", "13.0", "x86_64", "linux").name == "torch214-cxx11-cu130-x86_64-linux"
    assert Variant("2.14", "metal", None, "aarch64", "darwin").name == "torch214-metal-aarch64-darwin"
    assert Variant("2.13", "rocm", "7.1", "x86_64", "linux").name == "torch213-cxx11-rocm71-x86_64-linux"


def test_rocm_index_template_spells_the_toolkit_version_with_its_dot(tmp_path: Path) -> None:
    """The PyTorch wheel index names ROCm directories rocm7.2 (not rocm72, the variant's compute tag)."""
    f = tmp_path / "m.toml"
    f.write_text(
        '[torch-index]\nrocm = "https://idx.example/rocm{toolkit}"\n[[build]]\nbackend = "rocm"\n'
        'torch = ["2.14"]\ntoolkits = ["7.2"]\nsystems = ["x86_64-linux"]\n'
    )
    assert load_matrix(f).index_for(parse_name("torch214-cxx11-rocm72-x86_64-linux")) == "https://idx.example/rocm7.2"


def test_variants_text_prints_every_reason_whole_within_80_columns() -> None:
    """Issue 20 item 6: the table held the reasons and cut nearly all of them off in a pipe."""
    from toolkit.cli import app

    pkg = ["-p", "ggml-attn-kernels"]
    doc = json.loads(CliRunner().invoke(app, ["variants", "-C", str(REPO), *pkg, "--json"]).stdout)
    res = CliRunner().invoke(app, ["variants", "-C", str(REPO), *pkg])
    assert res.exit_code == 0, res.output
    body = res.output.splitlines()[1:]  # the title names the matrix path
    assert max(len(ln) for ln in body) <= 80, max(body, key=len)
    text = " ".join(" ".join(ln.split()) for ln in body)
    for r in doc["variants"]:
        want = r["reason"] if not r["buildable"] and not r["provision"] else r["engine"]
        assert " ".join(want.split()) in text, r["name"]


ROW = '[[build]]\nbackend="cuda"\ntoolkits=["13.0"]\nsystems=["x86_64-linux"]\n'


@pytest.mark.parametrize(
    "extra, key, near",
    [
        ('[sourcs.torch]\n"2.14-cu130" = { version = "2.14.1" }\n', "sourcs", "sources"),
        ('[torch-indx]\ncuda = "https://idx.example/{compute}"\n', "torch-indx", "torch-index"),
        ('[sources.torhc]\n"2.14-cu130" = { version = "2.14.1" }\n', "torhc", "torch"),
        ('[torch-index]\ncdua = "https://idx.example/{compute}"\n', "cdua", "cuda"),
        ("shema = 1\n", "shema", "schema"),
    ],
)
def test_misspelt_tables_and_keys_are_refused_naming_the_nearest_valid_one(extra: str, key: str, near: str) -> None:
    """Issue 18: `[sourcs.torch]` used to be ignored, silently turning a provisionable row into "elsewhere"."""
    text = ('torch=["2.14"]\n' + extra + ROW) if not extra.startswith("[") else ('torch=["2.14"]\n' + ROW + extra)
    with pytest.raises(ConfigError) as exc:
        _matrix(text)
    line = exc.value.one_line()
    assert f"unknown key {key!r}" in line and f"did you mean {near!r}" in line, line
    assert len(line.splitlines()) == 1


def test_a_misspelt_matrix_table_exits_2_through_the_cli(tmp_path: Path) -> None:
    from toolkit.cli import app

    proj = tmp_path / "p"
    copy_build_kernel(proj)
    with open(proj / "variants" / "matrix.toml", "a") as fh:
        fh.write('\n[sourcs.torch]\n"2.13-cu130" = { version = "2.13.0" }\n')
    for cmd in (["variants"], ["build", "--all", "--dry-run"]):
        res = CliRunner().invoke(app, [*cmd, "-C", str(proj)])
        assert res.exit_code == 2 and "did you mean 'sources'" in res.output, res.output
