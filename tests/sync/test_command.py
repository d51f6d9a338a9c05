"""`ggml-vendor sync` / `sync --check` / `status` end to end on fixture upstream repositories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from tests.helpers.fixture_repos import (
    ALL_V1,
    BASE_FILES,
    FA_CUDA,
    GDN_CU_V1,
    GDN_CUDA,
    METAL,
    FixtureRepo,
    build_upstream,
    git,
    locked,
    make_patch,
    make_project,
    sync_project,
    tree_state,
)
from toolkit.cli import app
from toolkit.core import config
from toolkit.core.config import Config
from toolkit.core.errors import PatchError, UpstreamError, VendorError, VendorStateError
from toolkit.core.hashing import sha256_bytes
from toolkit.sync.embedded import EMBEDDED, materialize_mini_upstream
from toolkit.sync.project_plan import SyncRequest
from toolkit.sync.report import SyncReport

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def up(tmp_path_factory: pytest.TempPathFactory) -> FixtureRepo:
    return build_upstream(tmp_path_factory.mktemp("upstream") / "ggml", "ggml")


@pytest.fixture(scope="session")
def up_llama(tmp_path_factory: pytest.TempPathFactory) -> FixtureRepo:
    return build_upstream(tmp_path_factory.mktemp("upstream") / "llama.cpp", "llama.cpp")


pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")  # a fresh upstream cache per test, no mirror


@pytest.fixture
def proj(tmp_path: Path, up: FixtureRepo) -> Config:
    return config.load(make_project(tmp_path / "proj", str(up.path)))


def sync(cfg: Config, **kw: Any) -> SyncReport:
    return sync_project(cfg, SyncRequest(**kw))


def cli(cfg: Config, *args: str) -> Result:
    return runner.invoke(app, [*args, "-C", str(cfg.root)])


def vendored(cfg: Config) -> set[str]:
    base = cfg.vendor_dir / "ggml"
    return {p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()}


def upstream_bytes(repo: FixtureRepo, rev: str, path: str) -> bytes:
    full = path if (not repo.prefix or path == "LICENSE") else repo.prefix + path
    return subprocess.run(["git", "show", f"{rev}:{full}"], cwd=repo.path, capture_output=True, check=True).stdout


# --- the happy path ----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["ggml", "llama.cpp"])
def test_first_sync_both_layouts(tmp_path: Path, up: FixtureRepo, up_llama: FixtureRepo, layout: str) -> None:
    repo = up if layout == "ggml" else up_llama
    cfg = config.load(make_project(tmp_path / "p", str(repo.path)))
    rep = sync(cfg, rev="v1")
    assert rep.status == "synced"
    lock = locked(cfg.vendor_dir)
    assert lock.layout == layout and lock.commit == repo.commits["v1"] and lock.rev == "v1"
    assert lock.upstream == str(repo.path.resolve())
    assert vendored(cfg) == ALL_V1 == set(lock.files)
    for path in ALL_V1:  # bytes straight from git, prefix stripped
        data = (cfg.vendor_dir / "ggml" / path).read_bytes()
        assert data == upstream_bytes(repo, "v1", path)
        assert lock.files[path] == sha256_bytes(data)
    assert set(lock.closure("fixture-kernels:gated_delta_net", "cuda")) == GDN_CUDA
    assert set(lock.closure("fixture-kernels:flash_attn", "cuda")) == FA_CUDA
    assert (
        set(lock.closure("fixture-kernels:gated_delta_net", "metal"))
        == METAL
        == set(lock.closure("fixture-kernels:flash_attn", "metal"))
    )
    backend_h, license_file = lock.info("include/ggml-backend.h"), lock.info("LICENSE")
    assert backend_h is not None and license_file is not None
    assert backend_h.reason == "included by src/ggml-cuda/common.cuh:4"
    assert license_file.reason == "always ships (license notice)"
    lic = {i.path: i for i in lock.licenses}
    assert lic["LICENSE"].spdx == ("MIT",) and lic["LICENSE"].copyright == ("Copyright (c) 2024 The fixture authors",)
    assert lic["include/ggml.h"].spdx == ("MIT",)
    assert lic["src/ggml-metal/ggml-metal.metal"].copyright[0].endswith("Copyright (c) 2023 Someone Else.")
    assert lock.fingerprints["gdn-cuda launcher signature"] != "absent"
    assert lock.fingerprints["metal gdn kargs"] == "absent"  # not in the fixture's header
    # the pristine blob id is recorded too
    common_h = lock.info("src/ggml-common.h")
    assert common_h is not None
    assert common_h.blob == git(repo.path, "rev-parse", f"v1:{repo.prefix}src/ggml-common.h")


@pytest.mark.parametrize(
    "rev_of",
    [
        lambda r: ("v1", r.commits["v1"]),
        lambda r: (r.commits["v1b"][:8], r.commits["v1b"]),
        lambda r: (r.commits["v1b"], r.commits["v1b"]),
        lambda r: ("release", r.commits["v2"]),
        lambda r: ("master", r.commits["v2"]),
    ],
    ids=["tag", "short-sha", "full-sha", "branch", "default-branch"],
)
def test_rev_forms_are_recorded_as_full_commit(
    proj: Config, up: FixtureRepo, rev_of: Callable[[FixtureRepo], tuple[str, str]]
) -> None:
    rev, full = rev_of(up)
    sync(proj, rev=rev)
    lock = locked(proj.vendor_dir)
    assert lock.commit == full and lock.rev == rev


def test_post_split_metal_entry_wins_when_present(proj: Config) -> None:
    sync(proj, rev="metal-split")
    lock = locked(proj.vendor_dir)
    assert lock.entries["fixture-kernels:gated_delta_net"]["metal"] == ("src/ggml-metal/kernels/gated_delta_net.metal",)
    assert set(lock.closure("fixture-kernels:gated_delta_net", "metal")) == {
        "src/ggml-metal/kernels/gated_delta_net.metal",
        "src/ggml-metal/kernels/common.h",
        "src/ggml-metal/ggml-metal-impl.h",
        "src/ggml-common.h",
    }
    assert lock.entries["fixture-kernels:flash_attn"]["metal"] == ("src/ggml-metal/ggml-metal.metal",)


def test_in_tree_symlink_is_vendored_as_a_regular_file(proj: Config) -> None:
    sync(proj, rev="symlink-inside")
    f = proj.vendor_dir / "ggml" / "src/ggml-cuda/vendors/cuda.h"
    assert not f.is_symlink() and f.read_text() == "#pragma once\n// the real one\n"


def test_embedded_upstream_offline(tmp_path: Path) -> None:
    cfg = config.load(make_project(tmp_path / "p", "https://unreachable.invalid/ggml"))
    rep = sync(cfg, rev="master", upstream=EMBEDDED)
    _, commit = materialize_mini_upstream()
    lock = locked(cfg.vendor_dir)
    assert lock.upstream == EMBEDDED and lock.commit == commit and rep.status == "synced"
    assert {
        "src/ggml-cuda/gated_delta_net.cu",
        "src/ggml-cuda/fattn-vec.cuh",
        "src/ggml-metal/ggml-metal.metal",
        "src/ggml-cuda/vendors/hip.h",
        "include/ggml.h",
        "LICENSE",
    } <= set(lock.files)
    assert lock.licenses and lock.licenses[0].spdx == ("MIT",)
    # re-sync of the pin needs neither --rev nor --upstream (both come from the lock) and writes nothing
    assert sync(cfg).status == "unchanged"
    # and --upstream embedded needs no --rev: the miniature has one commit (master)
    assert sync(cfg, upstream=EMBEDDED).status == "unchanged"


_FIRST_USE = """
import os, sys, time
from pathlib import Path
from toolkit.sync.embedded import materialize_mini_upstream
from toolkit.sync.upstream import Source
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.write_text("")
while not go.exists():
    time.sleep(0.002)
path, commit = materialize_mini_upstream()
for _ in range(10):  # read it the way sync does, while the others are still materialising theirs
    src = Source(path, "embedded")
    snap = src.snapshot(src.resolve("master"))
    assert snap.commit == commit and snap.read("include/ggml.h"), "unreadable"
    src.close()
"""


def test_embedded_first_use_by_concurrent_processes(tmp_path: Path) -> None:
    """Several projects using the embedded upstream for the first time at once, sharing one cache: each one
    reads a complete repository (none deletes the one another reads), and one repository is left."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for round_ in range(3):
        env["GGML_VENDOR_CACHE"] = str(tmp_path / f"cache{round_}")
        sync_dir = tmp_path / f"sync{round_}"
        sync_dir.mkdir()
        go = sync_dir / "go"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _FIRST_USE, str(sync_dir / f"ready{i}"), str(go)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(4)
        ]
        deadline = time.monotonic() + 60
        while len(list(sync_dir.glob("ready*"))) < len(procs) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.write_text("")
        outs = [p.communicate(timeout=120)[0] for p in procs]
        failed = [out for p, out in zip(procs, outs, strict=True) if p.returncode != 0]
        assert not failed, f"round {round_}: {len(failed)} of {len(procs)} failed:\n{failed[0]}"
        built = Path(env["GGML_VENDOR_CACHE"]) / "mini-upstream"
        assert len([p for p in built.iterdir() if not p.name.startswith(".")]) == 1
        assert not [p for p in built.iterdir() if p.name.startswith(".mini-upstream-")], "staging left behind"


def test_mirror_reads_locally_but_records_the_url(proj: Config, up: FixtureRepo) -> None:
    url = "https://example.invalid/ggml-org/ggml"
    sync(proj, rev="v1", upstream=url, mirror=up.path)
    assert locked(proj.vendor_dir).upstream == url
    assert sync(proj, mirror=up.path).status == "unchanged"


def test_url_upstream_is_a_filtered_shallow_cache(
    tmp_path: Path, up: FixtureRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = tmp_path / "served.git"
    git(tmp_path, "clone", "-q", "--bare", str(up.path), str(served))
    git(served, "config", "uploadpack.allowFilter", "true")
    git(served, "config", "uploadpack.allowAnySHA1InWant", "true")
    url = served.resolve().as_uri()
    cfg = config.load(make_project(tmp_path / "p", url))
    rep = sync(cfg, rev="v1")
    assert rep.status == "synced" and vendored(cfg) == ALL_V1
    cache = next((tmp_path / "cache" / "upstreams").iterdir())
    assert (cache / "shallow").exists()
    assert git(cache, "config", "remote.origin.partialclonefilter") == "blob:none"
    # only the vendored blobs were fetched, plus ggml-cpu's ops.cpp (read, never vendored, for the
    # behaviour fingerprint of the ops' CPU reference), not e.g. the README

    def cached(path: str) -> bool:
        return (
            subprocess.run(
                ["git", "--git-dir", str(cache), "cat-file", "-e", f"{up.commits['v1']}:{path}"],
                env={"GIT_NO_LAZY_FETCH": "1", "PATH": "/usr/bin:/bin"},
                capture_output=True,
            ).returncode
            == 0
        )

    assert not cached("README.md") and cached("src/ggml-cpu/ops.cpp")
    # the pinned full sha is now cached: re-sync works with the server gone
    shutil.rmtree(served)
    shutil.rmtree(cfg.vendor_dir / "ggml")
    assert sync(cfg).status == "synced" and vendored(cfg) == ALL_V1
    # ... but a branch needs the server
    with pytest.raises(UpstreamError, match="cannot reach upstream"):
        sync(cfg, rev="master")


# --- refusals: one clear line, nothing changed -------------------------------------------------------


def assert_refused(cfg: Config, exc_type: type[VendorError], match: str, **kw: Any) -> None:
    before = tree_state(cfg.root)
    with pytest.raises(exc_type) as exc:
        sync(cfg, **kw)
    assert "\n" not in exc.value.one_line() and exc.value.remedy
    assert tree_state(cfg.root) == before, "a refused sync changed the project"
    assert exc.match(match)


@pytest.mark.parametrize(
    "rev",
    [
        "--upload-pack=touch /tmp/pwned",
        "-h",
        "HEAD~1",
        "v1^{tree}",
        "a..b",
        "x y",
        "master@{1}",
        "refs/heads/../x",
        "",
        "v1:LICENSE",
        "v1\n",
    ],
)
def test_refuses_revs_that_are_not_plain(proj: Config, rev: str) -> None:
    sync(proj, rev="v1")
    assert_refused(proj, UpstreamError, "is not a plain branch, tag or commit id", rev=rev)


def test_option_injection_via_cli_is_one_line_exit_3(proj: Config, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    res = cli(proj, "sync", "--rev", f"--upload-pack=touch {marker}")
    assert res.exit_code == 3 and not marker.exists()
    assert res.output.count("\n") == 1 and "not a plain branch" in res.output


def test_refuses_unknown_rev(proj: Config) -> None:
    sync(proj, rev="v1")
    assert_refused(proj, UpstreamError, "unknown revision 'v9'", rev="v9")
    assert_refused(proj, UpstreamError, "unknown revision 'deadbeef'", rev="deadbeef")


def test_refuses_upstream_that_is_not_a_repository(proj: Config, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    assert_refused(proj, UpstreamError, "is not a git repository", rev="v1", upstream=str(tmp_path / "plain"))
    assert_refused(
        proj, UpstreamError, "neither an existing directory nor a git URL", rev="v1", upstream=str(tmp_path / "nope")
    )


def test_refuses_unreachable_url(proj: Config, tmp_path: Path) -> None:
    assert_refused(proj, UpstreamError, "cannot reach upstream", rev="v1", upstream=(tmp_path / "gone.git").as_uri())


def test_refuses_a_tree_that_is_not_ggml(proj: Config, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "README").write_text("x\n")
    git(other, "add", "-A")
    git(other, "commit", "-qm", "x")
    assert_refused(proj, UpstreamError, "neither llama.cpp nor ggml", rev="HEAD", upstream=str(other))


def test_refuses_missing_entry_file(proj: Config) -> None:
    sync(proj, rev="v1")
    assert_refused(proj, UpstreamError, "entry file of fixture-kernels:gated_delta_net/metal not found", rev="no-metal")


def test_refuses_unresolvable_include_naming_file_and_line(proj: Config) -> None:
    assert_refused(
        proj,
        UpstreamError,
        r'src/ggml-cuda/fattn-common.cuh:5: #include "nowhere.cuh" not found',
        rev="missing-include",
    )


def test_refuses_symlink_escaping_the_tree(proj: Config, up_llama: FixtureRepo, tmp_path: Path) -> None:
    assert_refused(proj, UpstreamError, "symlink to .*outside the ggml tree", rev="symlink-escape")
    cfg = config.load(make_project(tmp_path / "p2", str(up_llama.path)))
    assert_refused(cfg, UpstreamError, "symlink to .*outside the ggml tree", rev="symlink-escape")


def test_submodules_are_skipped_and_an_include_into_one_is_refused(
    proj: Config, up_llama: FixtureRepo, tmp_path: Path
) -> None:
    for cfg in (proj, config.load(make_project(tmp_path / "p2", str(up_llama.path)))):
        res = cli(cfg, "sync", "--rev", "submodule")
        assert res.exit_code == 0, res.output
        assert vendored(cfg) == ALL_V1
        listed = cli(cfg, "patch", "list")
        assert listed.exit_code == 0, listed.output
        listed = cli(cfg, "patch", "list", "--rev", "submodule-include")
        assert listed.exit_code == 3 and listed.output.count("\n") == 1, listed.output
        assert "inside the git submodule" in listed.output
        assert_refused(
            cfg, UpstreamError, r"gated_delta_net.cuh:2: .*inside the git submodule", rev="submodule-include"
        )
        res = cli(cfg, "sync", "--rev", "submodule-include")
        assert res.exit_code == 3 and res.output.count("\n") == 1, res.output


def test_refuses_revision_without_license(proj: Config) -> None:
    assert_refused(proj, UpstreamError, "LICENSE is missing", rev="no-license")


def test_refuses_dirty_vendor_unless_forced(proj: Config) -> None:
    sync(proj, rev="v1")
    edited = proj.vendor_dir / "ggml" / "src/ggml-common.h"
    edited.write_text("// my local edit\n")
    extra = proj.vendor_dir / "ggml" / "src/mine.h"
    extra.write_text("mine\n")
    assert_refused(proj, VendorStateError, "local changes that sync would overwrite: .*mine.h \\(extra\\)", rev="v2")
    rep = sync(proj, rev="v2", force=True)
    assert rep.plan is not None
    assert {(f.kind, f.path) for f in rep.plan.overwrites} == {
        ("edited", "ggml/src/ggml-common.h"),
        ("extra", "ggml/src/mine.h"),
    }
    assert not extra.exists() and edited.read_bytes() == BASE_FILES["src/ggml-common.h"].encode()


def test_force_lists_what_it_overwrites_on_the_cli(proj: Config) -> None:
    sync(proj, rev="v1")
    (proj.vendor_dir / "ggml" / "src/ggml-impl.h").write_text("edited\n")
    res = cli(proj, "sync", "--rev", "v1")
    assert res.exit_code == 4 and "vendor/ggml/src/ggml-impl.h (edited)" in res.output
    res = cli(proj, "sync", "--rev", "v1", "--force")
    assert res.exit_code == 0 and "overwrote edited" in res.output and "ggml/src/ggml-impl.h" in res.output


def test_unlocked_files_in_vendor_count_as_dirty(proj: Config) -> None:
    (proj.vendor_dir / "ggml").mkdir()
    (proj.vendor_dir / "ggml" / "handmade.h").write_text("x\n")
    assert_refused(proj, VendorStateError, "handmade.h \\(extra\\)", rev="v1")


def test_edit_that_equals_the_new_content_is_not_a_loss(proj: Config, up: FixtureRepo) -> None:
    sync(proj, rev="v1")
    (proj.vendor_dir / "ggml" / "src/ggml-cuda/gated_delta_net.cu").write_bytes(
        upstream_bytes(up, "v1b", "src/ggml-cuda/gated_delta_net.cu")
    )
    assert sync(proj, rev="v1b").status == "synced"


def test_dry_run_writes_nothing(proj: Config) -> None:
    before = tree_state(proj.root)
    rep = sync(proj, rev="v1", dry_run=True)
    assert rep.plan is not None
    assert rep.status == "dry-run" and len(rep.plan.changes) == len(ALL_V1) + 1
    assert tree_state(proj.root) == before


def test_dry_run_leaves_an_interrupted_swap_for_the_real_run(proj: Config) -> None:
    """--dry-run plans and prints: it does not even finish a previous run's interrupted swap (the real run
    does, and plans again afterwards)."""
    sync(proj, rev="v1")
    leftover = proj.root / ".vendor.stage-interrupted"
    (leftover / "ggml").mkdir(parents=True)
    res = cli(proj, "sync", "--rev", "v2", "--dry-run")
    assert res.exit_code == 0 and "dry run" in res.output and leftover.is_dir()
    assert locked(proj.vendor_dir).rev == "v1"
    res = cli(proj, "sync", "--rev", "v2")
    assert res.exit_code == 0, res.output
    assert not leftover.exists() and "removed leftover .vendor.stage-interrupted" in res.output
    assert locked(proj.vendor_dir).rev == "v2"


# --- idempotence, check, status ----------------------------------------------------------------------


def test_noop_resync_writes_nothing(proj: Config) -> None:
    sync(proj, rev="v1")
    before = tree_state(proj.root)
    rep = sync(proj, rev="v1")
    assert rep.plan is not None
    assert rep.status == "unchanged" and rep.written == () and rep.plan.noop
    assert tree_state(proj.root) == before  # bytes and mtimes
    res = cli(proj, "sync", "--rev", "v1")
    assert res.exit_code == 0 and "nothing written" in res.output
    assert tree_state(proj.root) == before


@pytest.mark.parametrize("digits", [40, 12])
def test_naming_the_pinned_commit_by_its_sha_is_a_noop(proj: Config, up: FixtureRepo, digits: int) -> None:
    """Pinned as `master`: `sync --rev <sha of that commit>` keeps the lock's rev, writing nothing at all."""
    sync(proj, rev="master")
    before = tree_state(proj.root)
    sha = up.commits["v2"][:digits]
    res = cli(proj, "sync", "--rev", sha)
    assert res.exit_code == 0 and "nothing written" in res.output, res.output
    assert tree_state(proj.root) == before  # the lock's bytes too: rev stays "master"
    assert locked(proj.vendor_dir).rev == "master"
    assert sync(proj, rev=sha).status == "unchanged"


def test_naming_another_commit_by_sha_records_the_sha(proj: Config, up: FixtureRepo) -> None:
    sync(proj, rev="master")
    sync(proj, rev=up.commits["v1"])
    assert locked(proj.vendor_dir).rev == up.commits["v1"]


def test_fresh_clone_resync_restores_sources_from_the_lock(proj: Config) -> None:
    sync(proj, rev="v2")
    lock_bytes = (proj.vendor_dir / "UPSTREAM").read_bytes()
    shutil.rmtree(proj.vendor_dir / "ggml")  # what a fresh clone of the project has: lock + patches only
    res = cli(proj, "sync", "--check")
    assert res.exit_code == 4 and "missing" in res.output
    rep = sync(proj)
    assert rep.status == "synced" and (proj.vendor_dir / "UPSTREAM").read_bytes() == lock_bytes
    assert cli(proj, "sync", "--check").exit_code == 0


def test_check_detects_edited_missing_extra(proj: Config) -> None:
    sync(proj, rev="v1")
    res = cli(proj, "sync", "--check")
    assert res.exit_code == 0 and "matches vendor/UPSTREAM" in res.output
    ggml = proj.vendor_dir / "ggml"
    cases: dict[str, Callable[[], object]] = {
        "edited": lambda: (ggml / "include/ggml.h").write_text("changed\n"),
        "missing": lambda: (ggml / "src/ggml-cuda/convert.cuh").unlink(),
        "extra": lambda: (ggml / "src/ggml-cuda/notes.txt").write_text("x\n"),
    }
    for kind, make in cases.items():
        sync(proj, rev="v1", force=True)
        make()
        res = cli(proj, "sync", "--check", "--json")
        assert res.exit_code == 4, kind
        doc = json.loads(res.stdout)
        assert doc["clean"] is False and [f["kind"] for f in doc["findings"]] == [kind]


def test_check_notices_symlinked_file(proj: Config, tmp_path: Path) -> None:
    sync(proj, rev="v1")
    target = proj.vendor_dir / "ggml" / "include/ggml.h"
    keep = target.read_bytes()
    (tmp_path / "same.h").write_bytes(keep)
    target.unlink()
    target.symlink_to(tmp_path / "same.h")  # same bytes, but a link: not what sync wrote
    res = cli(proj, "sync", "--check", "--json")
    assert res.exit_code == 4 and json.loads(res.stdout)["findings"][0]["detail"] == "not a regular file"


def test_status_json_and_text(proj: Config) -> None:
    res = cli(proj, "status", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["pinned"] is False
    sync(proj, rev="v1")
    (proj.vendor_dir / "patches" / "0001-new.patch").write_text("--- a/x\n+++ b/x\n")
    doc = json.loads(cli(proj, "status", "--json").stdout)
    assert doc["pinned"] and doc["commit"] == locked(proj.vendor_dir).commit and doc["layout"] == "ggml"
    assert doc["clean"] is False and doc["patches"] == [
        {"name": "0001-new.patch", "verdict": None, "state": "not applied yet", "description": ""}
    ]
    text = cli(proj, "status").output
    assert "pinned" in text and "patches changed" in text


# --- moving the pin: drift -----------------------------------------------------------------------------


def test_pin_move_reports_drift(proj: Config, up: FixtureRepo) -> None:
    sync(proj, rev="v1")
    keep = proj.vendor_dir / "ggml" / "include/ggml.h"
    mtime = keep.stat().st_mtime_ns
    rep = sync(proj, rev="v2")
    d = rep.drift
    assert d is not None
    assert d.old_commit == up.commits["v1"] and d.new_commit == up.commits["v2"] and not d.backwards
    assert d.renamed == (("src/ggml-cuda/convert.cuh", "src/ggml-cuda/cvt.cuh"),)
    assert set(d.changed) == {"src/ggml-cuda/gated_delta_net.cu", "src/ggml-cuda/fattn-common.cuh"}
    assert d.added == () and d.removed == ()
    assert [s for _, s in d.commits or ()] == [
        "cuda : rename convert.cuh, add K to the launcher (llama/102)",
        "cuda : tweak the gdn kernel body (llama/101)",
    ]
    regions = {r.name: r for r in d.regions}
    assert set(regions) == {"gdn-cuda launcher signature"}
    assert (
        "+        int64_t S_v, int64_t H, int K, cudaStream_t stream) {" in regions["gdn-cuda launcher signature"].diff
    )
    md, js = (Path(p) for p in rep.drift_paths)
    assert md.parent == proj.build_dir / "reports" and md.suffix == ".md" and js.suffix == ".json"
    assert "renamed: `src/ggml-cuda/convert.cuh` → `src/ggml-cuda/cvt.cuh`" in md.read_text()
    assert json.loads(js.read_text())["files"]["renamed"] == [
        {"from": "src/ggml-cuda/convert.cuh", "to": "src/ggml-cuda/cvt.cuh"}
    ]
    # unchanged files keep their inode and mtime across the swap
    assert keep.stat().st_mtime_ns == mtime
    assert not (proj.vendor_dir / "ggml" / "src/ggml-cuda/convert.cuh").exists()


HOSTILE_SUBJECT = (
    "cuda: \x1b[31mred\x1b[0m \x1b]8;;https://evil.example\x07a link\x1b]8;;\x07 \x1b]0;title\x07 \u202eright"
)


def test_upstream_text_reaches_terminal_and_report_escaped(tmp_path: Path, up: FixtureRepo) -> None:
    """A hostile upstream's commit subject (SGR colours, an OSC 8 hyperlink, an OSC 0 title, a bidi
    override) is shown with its escape sequences spelled out by sync, status and the drift report."""
    hostile = tmp_path / "hostile"
    git(tmp_path, "clone", "-q", str(up.path), str(hostile))
    (hostile / "src/ggml-cuda/gated_delta_net.cuh").write_text('#include "common.cuh"\n#include "ggml.h"\n// x\n')
    git(hostile, "commit", "-qam", HOSTILE_SUBJECT)
    cfg = config.load(make_project(tmp_path / "proj", str(hostile)))
    assert cli(cfg, "sync", "--rev", "v1").exit_code == 0
    outputs = [cli(cfg, "sync", "--rev", "HEAD"), cli(cfg, "status"), cli(cfg, "sync", "--check")]
    md = next((cfg.build_dir / "reports").glob("drift-*.md")).read_text()
    for text in [*(r.output for r in outputs), md]:
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text
    spelled = "cuda: \\x1b[31mred\\x1b[0m \\x1b]8;;https://evil.example\\x07a link"
    assert spelled in outputs[0].output and spelled in outputs[1].output and spelled in md
    assert "\\u202eright" in md


def test_pin_moving_backwards_lists_the_dropped_commits(proj: Config) -> None:
    sync(proj, rev="v2")
    d = sync(proj, rev="v1").drift
    assert d is not None
    assert d.backwards and [s for _, s in d.commits or ()][-1] == "cuda : tweak the gdn kernel body (llama/101)"
    assert d.renamed == (("src/ggml-cuda/cvt.cuh", "src/ggml-cuda/convert.cuh"),)


def test_pin_move_cli_prints_drift_and_json(proj: Config) -> None:
    sync(proj, rev="v1")
    res = cli(proj, "sync", "--rev", "v2", "--json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["status"] == "synced" and doc["drift"]["files"]["changed"]
    assert doc["drift_report"][0].endswith(".md")


# --- patches through sync ------------------------------------------------------------------------------

GDN_V1B = GDN_CU_V1.replace("q[0] * k[0]", "q[0] * k[0] + 1.0f")


def write_patch(cfg: Config, name: str, text: str) -> None:
    (cfg.vendor_dir / "patches" / name).write_text(text)


def test_patch_applied_and_locked(proj: Config, up: FixtureRepo) -> None:
    write_patch(
        proj,
        "0001-scale.patch",
        make_patch("src/ggml-cuda/gated_delta_net.cu", GDN_CU_V1, GDN_CU_V1.replace("dst[0] =", "dst[0] = 2.0f *")),
    )
    (proj.vendor_dir / "patches" / "README.md").write_text("our patches\n")
    rep = sync(proj, rev="v1")
    assert rep.plan is not None
    assert [(p.name, p.verdict) for p in rep.plan.patches] == [("0001-scale.patch", "applied")]
    lock = locked(proj.vendor_dir)
    info = lock.info("src/ggml-cuda/gated_delta_net.cu")
    assert info is not None
    assert info.patched_by == ("0001-scale.patch",)
    assert info.blob == git(up.path, "rev-parse", "v1:src/ggml-cuda/gated_delta_net.cu")  # pristine
    assert "dst[0] = 2.0f *" in (proj.vendor_dir / "ggml" / "src/ggml-cuda/gated_delta_net.cu").read_text()
    assert (proj.vendor_dir / "patches" / "README.md").read_text() == "our patches\n"  # survives the swap
    assert lock.patches[0].sha256 == sha256_bytes((proj.vendor_dir / "patches/0001-scale.patch").read_bytes())
    assert sync(proj, rev="v1").status == "unchanged"


def test_conflicting_patch_stops_with_nothing_changed(proj: Config) -> None:
    sync(proj, rev="v1")
    write_patch(
        proj,
        "0001-launcher.patch",
        make_patch(
            "src/ggml-cuda/gated_delta_net.cu",
            GDN_CU_V1,
            GDN_CU_V1.replace("int64_t S_v, int64_t H, cudaStream_t stream", "int64_t S_v, int64_t H, cudaStream_t s"),
        ),
    )
    assert_refused(
        proj, PatchError, r"0001-launcher.patch conflicts: hunk #1 .* of src/ggml-cuda/gated_delta_net.cu", rev="v2"
    )


def test_already_upstream_patch_is_offered_for_dropping(proj: Config) -> None:
    write_patch(proj, "0001-tweak.patch", make_patch("src/ggml-cuda/gated_delta_net.cu", GDN_CU_V1, GDN_V1B))
    sync(proj, rev="v1")
    assert locked(proj.vendor_dir).patches[0].verdict == "applied"
    res = cli(proj, "sync", "--rev", "v1b")
    assert res.exit_code == 0 and "0001-tweak.patch: already-upstream (drop it" in res.output
    assert locked(proj.vendor_dir).patches[0].verdict == "already-upstream"
    rep = sync(proj, rev="v1b", drop_upstreamed=True)
    assert rep.status == "synced" and not (proj.vendor_dir / "patches" / "0001-tweak.patch").exists()
    assert locked(proj.vendor_dir).patches == ()
