"""The sync stage's plan is pure: with the network closed it writes nothing (project, tool cache, upstream)
and fetches nothing. Objects that are not local yet (a URL's commit, the embedded miniature) become the plan's
first step, which execute carries out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.fixture_repos import FixtureRepo, git, locked, make_project, sync_project, tree_state
from toolkit import sync
from toolkit.cli import app
from toolkit.core import config
from toolkit.sync.embedded import EMBEDDED
from toolkit.sync.project_plan import SyncRequest

pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")  # a fresh upstream cache per test, no mirror


def served(tmp_path: Path, up: FixtureRepo) -> Path:
    repo = tmp_path / "served.git"
    git(tmp_path, "clone", "-q", "--bare", str(up.path), str(repo))
    git(repo, "config", "uploadpack.allowFilter", "true")
    git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    return repo


def state(*dirs: Path) -> list[dict[str, tuple[bytes, int]]]:
    return [tree_state(d) for d in dirs]


def test_plans_of_a_url_upstream_write_and_fetch_nothing(
    tmp_path: Path, up: FixtureRepo, isolated_upstream_cache: Path
) -> None:
    repo = served(tmp_path, up)
    cfg = config.load(make_project(tmp_path / "p", repo.resolve().as_uri()))
    sync_project(cfg, rev="v1")
    repo.rename(tmp_path / "unreachable.git")  # the network is closed from here on
    before = state(cfg.root, isolated_upstream_cache)

    again = sync.plan(cfg, SyncRequest())  # the pin: its objects are in the cache
    assert again.plan is not None and again.plan.noop and again.fetch == ""
    for rev in ("v2", up.commits["v2"]):  # a tag needs the network; so does a commit the cache lacks
        plan = sync.plan(cfg, SyncRequest(rev=rev))
        assert plan.plan is None and plan.fetch.startswith(f"fetch {rev} from file://"), plan.fetch
        assert plan.to_json()["fetch"] == plan.fetch and "would first fetch" in plan.lines()[0]
    assert state(cfg.root, isolated_upstream_cache) == before

    (tmp_path / "unreachable.git").rename(repo)
    rep = sync.execute(sync.plan(cfg, SyncRequest(rev="v2")))  # execute runs the planned fetch
    assert rep.status == "synced" and rep.fetch and locked(cfg.vendor_dir).commit == up.commits["v2"]


def test_dry_run_of_a_fetch_first_plan_says_so_and_writes_nothing(
    tmp_path: Path, up: FixtureRepo, isolated_upstream_cache: Path
) -> None:
    cfg = config.load(make_project(tmp_path / "p", served(tmp_path, up).resolve().as_uri()))
    before = state(cfg.root, isolated_upstream_cache.parent)
    res = CliRunner().invoke(app, ["sync", "--rev", "v1", "--dry-run", "--json", "-C", str(cfg.root)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["status"] == "dry-run" and doc["fetch"].startswith("fetch v1 from") and doc["changes"] is None
    assert state(cfg.root, isolated_upstream_cache.parent) == before
    assert not isolated_upstream_cache.exists()


def test_embedded_first_use_is_a_planned_step(tmp_path: Path, isolated_upstream_cache: Path) -> None:
    cfg = config.load(make_project(tmp_path / "p", "https://unreachable.invalid/ggml"))
    plan = sync.plan(cfg, SyncRequest(upstream=EMBEDDED))
    assert plan.plan is None and "embedded miniature" in plan.fetch
    assert not isolated_upstream_cache.exists(), "the plan built the miniature"
    assert sync.execute(plan).status == "synced"
    plan = sync.plan(cfg, SyncRequest(upstream=EMBEDDED))  # built now: a complete plan, offline
    assert plan.plan is not None and plan.plan.noop


def test_plan_from_a_local_clone_writes_nothing(tmp_path: Path, up: FixtureRepo) -> None:
    cfg = config.load(make_project(tmp_path / "p", str(up.path)))
    sync_project(cfg, rev="v1")
    before = state(cfg.root, up.path)
    plan = sync.plan(cfg, SyncRequest(rev="v2"))
    assert plan.plan is not None and plan.plan.changes and plan.drift is not None
    assert plan.lines()[0].startswith("dry run: would sync vendor/ to")
    assert state(cfg.root, up.path) == before


def test_sync_status_and_patch_follow_the_stage_protocol(tmp_path: Path, up: FixtureRepo) -> None:
    from toolkit.core.stage import Plan, Report, exit_code_of
    from toolkit.sync import patch_stage, patch_workflow
    from toolkit.sync import status as status_stage

    cfg = config.load(make_project(tmp_path / "p", str(up.path)))
    plan = sync.plan(cfg, SyncRequest(rev="v1"))
    report = sync.execute(plan)
    assert isinstance(plan, Plan) and isinstance(report, Report) and exit_code_of(report) == 0
    assert report.lines()[0].startswith("synced vendor/ to") and report.to_json()["status"] == "synced"

    # status is a query: it reads and reports, with no plan to carry out
    srep = status_stage.query(cfg)
    assert isinstance(srep, Report) and srep.to_json()["clean"] is True
    assert "vendor/ clean" in srep.lines()

    gdn = cfg.vendor_dir / "ggml" / "src/ggml-cuda/gated_delta_net.cu"
    gdn.write_text(gdn.read_text() + "// ours\n")
    save = patch_stage.plan(cfg, patch_stage.Request("save", "ours", "cuda: a comment"))
    assert isinstance(save, Plan) and save.lines()[0].startswith("would save vendor/patches/0001-ours.patch")
    saved = patch_stage.execute(save)
    assert isinstance(saved, Report) and saved.to_json()["written"] is True
    listed = patch_workflow.list_patches(cfg)
    assert isinstance(listed, Report) and "0001-ours.patch: applies" in "\n".join(listed.lines())
    drop = patch_stage.plan(cfg, patch_stage.Request("drop", "ours"))
    assert isinstance(drop, Plan) and drop.lines() == ["would drop vendor/patches/0001-ours.patch"]
    dropped = patch_stage.execute(drop)
    assert isinstance(dropped, Report) and dropped.lines() == ["dropped vendor/patches/0001-ours.patch"]
    assert "// ours" not in gdn.read_text()
