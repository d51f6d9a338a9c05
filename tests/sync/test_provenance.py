"""The upstream the lock names: always a URL that has the pinned commit (or, for a project whose upstream is a
local path, that path), never this machine's directory, whether the objects come from the upstream itself,
from --mirror or from GGML_VENDOR_MIRROR; a name that cannot have the commit is refused in one line (exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.helpers.fixture_repos import FixtureRepo, build_upstream, git, locked, make_project, sync_project
from toolkit.cli import app
from toolkit.core import config
from toolkit.core.lock import LOCK_NAME

runner = CliRunner()
URL = "https://example.invalid/ggml-org/ggml"


@pytest.fixture(scope="module")
def up_llama(tmp_path_factory: pytest.TempPathFactory) -> FixtureRepo:
    return build_upstream(tmp_path_factory.mktemp("prov") / "llama.cpp", "llama.cpp")


pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")  # a fresh upstream cache per test, no mirror


def bare_clone(src: Path, dest: Path, origin: str | None = None) -> Path:
    git(dest.parent, "clone", "-q", "--bare", "--no-local", str(src), str(dest))
    git(dest, "remote", "remove", "origin")
    if origin:
        git(dest, "remote", "add", "origin", origin)
    return dest


def cli(root: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, [*args, "-C", str(root)], env=env)


@pytest.mark.parametrize("how", ["--mirror", "GGML_VENDOR_MIRROR"])
def test_local_upstream_with_a_mirror_records_the_url_not_the_path(tmp_path: Path, up: FixtureRepo, how: str) -> None:
    cfg = config.load(make_project(tmp_path / "p", URL))
    local = bare_clone(up.path, tmp_path / "local.git")
    args, env = ["sync", "--rev", "v1", "--upstream", str(local)], {}
    if how == "--mirror":
        args += ["--mirror", str(up.path)]
    else:
        env["GGML_VENDOR_MIRROR"] = str(up.path)
    res = cli(cfg.root, *args, "--json", env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["upstream"] == URL
    text = (cfg.vendor_dir / LOCK_NAME).read_text()
    assert str(tmp_path) not in text and locked(cfg.vendor_dir).upstream == URL


def test_local_upstream_with_a_mirror_records_its_origin(tmp_path: Path, up: FixtureRepo) -> None:
    cfg = config.load(make_project(tmp_path / "p", URL))
    local = bare_clone(up.path, tmp_path / "local.git", origin="https://example.invalid/someone/ggml.git")
    rep = sync_project(cfg, rev="v1", upstream=str(local), mirror=up.path)
    assert rep.plan is not None
    assert rep.plan.lock.upstream == "https://example.invalid/someone/ggml.git"


def test_drift_names_the_url_when_the_pin_moves_through_a_mirror(tmp_path: Path, up: FixtureRepo) -> None:
    cfg = config.load(make_project(tmp_path / "p", URL))
    sync_project(cfg, rev="v1", mirror=up.path)
    local = bare_clone(up.path, tmp_path / "local.git")
    rep = sync_project(cfg, rev="v2", upstream=str(local), mirror=up.path)
    assert rep.drift is not None and rep.drift.upstream == URL
    assert "upstream changed" not in (rep.drift.history_note or ""), rep.drift.history_note
    assert str(tmp_path) not in json.dumps(rep.to_json()["drift"])


def test_llama_cpp_clone_without_origin_is_not_paired_with_the_ggml_url(tmp_path: Path, up_llama: FixtureRepo) -> None:
    cfg = config.load(make_project(tmp_path / "p", URL))
    local = bare_clone(up_llama.path, tmp_path / "llama.git")
    res = cli(cfg.root, "sync", "--rev", "v1", "--upstream", str(local))
    assert res.exit_code == 3, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "llama.cpp commit" in lines[0] and "remote add origin" in lines[0], res.output
    assert not (cfg.vendor_dir / LOCK_NAME).exists()
    # the same through a mirror, and an explicit ggml URL with llama.cpp objects
    assert cli(cfg.root, "sync", "--rev", "v1", "--upstream", str(local), "--mirror", str(local)).exit_code == 3
    assert cli(cfg.root, "sync", "--rev", "v1", "--upstream", URL, "--mirror", str(up_llama.path)).exit_code == 3
    assert not (cfg.vendor_dir / LOCK_NAME).exists()


def test_llama_cpp_clone_with_its_origin_is_fine(tmp_path: Path, up_llama: FixtureRepo) -> None:
    cfg = config.load(make_project(tmp_path / "p", URL))
    origin = "https://example.invalid/ggml-org/llama.cpp"
    local = bare_clone(up_llama.path, tmp_path / "llama.git", origin=origin)
    plan = sync_project(cfg, rev="v1", upstream=str(local)).plan
    assert plan is not None
    lock = plan.lock
    assert lock.upstream == origin and lock.layout == "llama.cpp"
