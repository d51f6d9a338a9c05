"""`outdated`'s torch and clients sections against a PEP 503/691 simple index served on 127.0.0.1 from real release
metadata (tests/fixtures/index/releases.json: torch 2.15.0 with its CUDA 13.2 Linux wheels and macOS builds as
pip's default index lists them, and a future 2.16.0); `update --torch` adds the rows to the matrix with its
comments kept; a malformed page or an unreachable index is one line, exit 13, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from tests.helpers.fixture_repos import git, tree_state
from tests.helpers.replay import cli, mini_history, pinned_project
from tests.helpers.simple_index import serve_index
from toolkit.core.errors import Outdated, PackageIndexError
from toolkit.outdated import index
from toolkit.outdated.releases import client_news, declared_ranges

pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")

PINS = ("kernels==0.17.2", "transformers==5.22.2")
# The ranges the project moves to (kernels 0.17.2 / 0.18.3 / 0.19.1 and transformers 5.22.2 / 5.24.0 / 5.25.0 tested).
RANGES = ("kernels>=0.17.2,<0.20", "transformers>=5.22.2,<5.26")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("replay") / "llama.cpp"
    return repo, mini_history(repo)


def _declare(root: Path, kernels: str, transformers: str) -> None:
    """The project's client requirements: kernels a dependency, transformers in two extras (as ours are)."""
    path = root / "pyproject.toml"
    doc = tomlkit.parse(path.read_text())
    project = doc["project"]
    project["dependencies"] = [d for d in project["dependencies"] if not d.startswith("kernels")] + [kernels]
    project["optional-dependencies"] = {"test": ["pytest>=8", transformers], "transformers": [transformers]}
    path.write_text(tomlkit.dumps(doc))
    git(root, "commit", "-qam", "client ranges")


def _one_release_behind(root: Path) -> None:
    """The matrices as they were before torch 2.15's Metal builds were added (by this very `update --torch`), so
    that the index fixture's torch 2.15.0 has builds the matrix lacks whatever the shipped matrices hold."""
    for path in sorted((root / "variants").glob("*.toml")):
        text = path.read_text()
        start = text.find("\n# torch 2.15: added by `ggml-vendor update --torch`")
        if start >= 0:
            end = text.index("\n\n", text.index("[[build]]", start)) + 1
            text = text[:start] + text[end:]
        path.write_text(text.replace('"2.15-metal" = { version = "2.15.0" }\n', ""))
    git(root, "commit", "-q", "--allow-empty", "-am", "matrices one torch release behind")


@pytest.fixture
def project(tmp_path: Path, history: tuple[Path, dict[str, str]]) -> Path:
    repo, pins = history
    root = pinned_project(tmp_path / "proj", repo, pins["p3"])  # the upstream is current: only the index moves
    _declare(root, *PINS)
    _one_release_behind(root)
    return root


def _outdated(root: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli(
        root,
        "outdated",
        "-p",
        "ggml-attn-kernels",
        "--skip",
        "upstream",
        "--skip",
        "patches",
        "--index-url",
        url,
        *extra,
    )


@pytest.mark.parametrize("style", ["json", "html", "ranges"])
def test_torch_and_clients_sections_read_the_index(project: Path, style: str) -> None:
    with serve_index(style) as (url, state):
        res = _outdated(project, url, "--json")
    assert res.returncode == Outdated.exit_code, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    torch = doc["torch"]
    assert torch["matrix_newest"] == "2.15"
    got = {r["version"]: r for r in torch["releases"]}
    assert sorted(got) == ["2.15.0", "2.16.0"]
    builds = {(b["compute"], b["system"], b["toolkit"]) for b in got["2.15.0"]["builds"]}
    # the CUDA build of a PyPI wheel is the runtime its core metadata pins: cuda-toolkit 13.2.2 -> cu132
    assert builds == {
        ("cu132", "x86_64-linux", "13.2.2"),
        ("cu132", "aarch64-linux", "13.2.2"),
        ("metal", "aarch64-darwin", ""),
    }
    assert [(b["compute"], b["system"]) for b in got["2.15.0"]["missing"]] == [("metal", "aarch64-darwin")]
    assert got["2.16.0"]["newer"] and {b["compute"] for b in got["2.16.0"]["missing"]} == {"cu134", "metal"}
    clients = {c["name"]: c for c in doc["clients"]}
    assert clients["kernels"]["newer"] == ["0.19.1", "0.18.3"] and clients["kernels"]["newest_tested"] == "0.17.2"
    assert clients["transformers"]["newer"] == ["5.25.0", "5.24.0", "5.23.0"]
    assert clients["transformers"]["declared_in"] == [
        "optional-dependencies.test",
        "optional-dependencies.transformers",
    ]
    assert doc["moved"] == ["torch", "clients"]
    wheels = [p for p in state.requests if p.endswith(".whl")]
    metas = [p for p in state.requests if p.endswith(".metadata")]
    if style == "ranges":
        assert wheels and not metas  # read from the wheel by byte ranges
    else:
        assert metas and not wheels  # PEP 658: the metadata file alone
    # only the newest minor and newer releases' metadata is read, never every release's
    assert all("2.15.0" in p or "2.16.0" in p for p in wheels + metas)


def test_clients_within_the_ranges_are_current(project: Path) -> None:
    _declare(project, *RANGES)
    with serve_index("json") as (url, _):
        res = _outdated(project, url, "--skip", "torch", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    clients = {c["name"]: c for c in json.loads(res.stdout)["clients"]}
    assert clients["kernels"]["newest_tested"] == "0.19.1" and clients["kernels"]["newer"] == []
    assert clients["transformers"]["newest_tested"] == "5.25.0" and clients["transformers"]["newer"] == []


def test_the_ranges_come_from_pyproject_requirements(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = ["kernels>=0.17.2,<0.20", "jinja2"]\n'
        '[project.optional-dependencies]\ntest = ["transformers>=5.22.2,<5.26"]\nhub = ["transformers!=5.24.0"]\n'
    )
    ranges = declared_ranges(pyproject)
    assert str(ranges["kernels"][0]) == "<0.20,>=0.17.2"
    assert ranges["transformers"][1] == ("optional-dependencies.test", "optional-dependencies.hub")
    from packaging.version import Version

    versions = [Version(v) for v in ("5.22.2", "5.24.0", "5.25.0", "5.26.0", "5.27.1")]
    news = client_news("transformers", ranges["transformers"], versions)
    assert news.newest_tested == "5.25.0" and news.newer == ("5.27.1", "5.26.0")  # 5.24.0 excluded, not newer
    assert client_news("kernels", None, versions).line().endswith("not declared in pyproject.toml (nothing to compare)")


def test_update_torch_adds_the_rows_keeping_comments_then_outdated_is_current(project: Path) -> None:
    _declare(project, *RANGES)
    matrix = project / "variants" / "ggml-attn-kernels.toml"
    old = matrix.read_text()
    with serve_index("json") as (url, _):
        # the index pip is set up with (PIP_INDEX_URL): the matrix says "pip's index", never its URL
        res = cli(project, "update", "--torch", "--report-file", str(project / "body.md"), env={"PIP_INDEX_URL": url})
        assert res.returncode == 0, res.stdout + res.stderr
        new = matrix.read_text()
        # every old line is still there, in order; the new rows come with a comment saying where they came from
        kept = iter(new.splitlines())
        assert all(any(line == n for n in kept) for line in old.splitlines())
        assert '"2.16-cu134" = { version = "2.16.0" }' in new and '"cuda-13.4" = { version = "13.4.0" }' in new
        assert '"2.15-metal" = { version = "2.15.0" }' in new
        assert (
            url.split("/simple")[0] not in new
            and "index =" not in new.split("\n[sources.torch]\n")[1].split("\n[torch-index]")[0]
        )
        assert (
            "# torch 2.16: added by `ggml-vendor update --torch` (pip's index lists torch 2.16.0, built for CUDA 13.4)."
            in new
        )
        listed = cli(project, "variants", "-p", "ggml-attn-kernels", "--json")
        names = {v["name"] for v in json.loads(listed.stdout)["variants"]}
        assert {"torch216-cxx11-cu134-x86_64-linux", "torch216-cxx11-cu134-aarch64-linux"} <= names
        assert {"torch215-metal-aarch64-darwin", "torch216-metal-aarch64-darwin"} <= names
        for check in (["ci", "--check"], ["render", "--check"], ["sync", "--check"]):
            done = cli(project, *check)
            assert done.returncode == 0, (check, done.stdout + done.stderr)
        body = (project / "body.md").read_text()
        assert "# Update torch 2.15, 2.16 variants" in body
        assert (
            "- [ ] the new variants of torch 2.16 CUDA 13.4 on x86_64-linux, aarch64-linux (ggml-attn-kernels.toml)"
            in body
        )
        res = cli(project, "outdated", "--skip", "upstream", "--skip", "patches", "--index-url", url)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "torch: current (the matrix's newest is 2.16" in res.stdout


def test_the_index_url_follows_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = http://127.0.0.1:1/from-config/simple\n")
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    assert index.configured_index() == ("http://127.0.0.1:1/from-config/simple/", "pip's configuration")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:1/from-env/simple")
    assert index.configured_index() == ("http://127.0.0.1:1/from-env/simple/", "PIP_INDEX_URL")
    assert index.configured_index("http://127.0.0.1:1/x")[1] == "--index-url"
    monkeypatch.delenv("PIP_INDEX_URL")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    if index._pip_config_index() is None:  # this machine's own pip configuration names no index-url
        assert index.configured_index() == (index.pip_default_index().rstrip("/") + "/", index.PIP_DEFAULT)


@pytest.mark.parametrize("how", ["malformed", "unreachable", "missing project"])
def test_a_bad_index_is_one_line_exit_13_nothing_written(project: Path, how: str) -> None:
    before = tree_state(project)
    if how == "unreachable":
        res = _outdated(project, "http://127.0.0.1:9/simple/")
        assert "cannot reach the package index" in res.stderr
    else:
        projects: dict[str, Any] | None = {} if how == "missing project" else None
        with serve_index("malformed", projects) as (url, _):
            res = _outdated(project, url)
            upd = cli(project, "update", "--torch", "--index-url", url)
        assert upd.returncode == PackageIndexError.exit_code, upd.stdout + upd.stderr
        assert ("malformed" if how == "malformed" else "HTTP 404") in res.stderr
    assert res.returncode == PackageIndexError.exit_code, res.stdout + res.stderr
    assert len([ln for ln in res.stderr.splitlines() if ln.startswith("error")]) == 1, res.stderr
    assert tree_state(project) == before
