"""`ggml-vendor patch save | list | drop` end to end on the fixture upstream, and patch descriptions in
status, the drift report and the Hub card."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import pytest
from typer.testing import CliRunner, Result

from tests.helpers.fixture_repos import (
    GDN_CU_V1,
    FixtureRepo,
    locked,
    make_patch,
    make_project,
    sync_project,
    tree_state,
)
from toolkit.cli import app
from toolkit.core import config
from toolkit.core.config import Config
from toolkit.core.lock import read_lock
from toolkit.sync.patches import describe, message_of
from toolkit.sync.project_plan import SyncRequest
from toolkit.sync.vendor_tree import check_vendor_dir

runner = CliRunner()
GDN = "src/ggml-cuda/gated_delta_net.cu"


pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")  # a fresh upstream cache per test, no mirror


@pytest.fixture
def proj(tmp_path: Path, up: FixtureRepo) -> Config:
    cfg = config.load(make_project(tmp_path / "proj", str(up.path)))
    sync_project(cfg, SyncRequest(rev="v1"))
    return cfg


def cli(cfg: Config, *args: str) -> Result:
    return runner.invoke(app, [*args, "-C", str(cfg.root)])


def gdn(cfg: Config) -> Path:
    return cfg.vendor_dir / "ggml" / GDN


def edit(cfg: Config, old: str, new: str) -> None:
    text = gdn(cfg).read_text()
    assert old in text
    gdn(cfg).write_text(text.replace(old, new))


def assert_one_line_refusal(cfg: Config, args: list[str], code: int, match: str) -> None:
    before = tree_state(cfg.vendor_dir)
    res = cli(cfg, *args)
    assert res.exit_code == code, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and match in lines[0], res.output
    assert tree_state(cfg.vendor_dir) == before  # nothing written


# --- save ----------------------------------------------------------------------------------------------


def test_save_writes_a_format_patch_and_relocks(proj: Config) -> None:
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 2.0f * q[0] * k[0];")
    res = cli(proj, "patch", "save", "scale", "-m", "cuda: scale the product\n\nWhy: a test. Before 10 us, after 5 us.")
    assert res.exit_code == 0, res.output
    assert "saved vendor/patches/0001-scale.patch: 1 file(s), +1 -1 — cuda: scale the product" in res.output
    data = (proj.vendor_dir / "patches" / "0001-scale.patch").read_bytes()
    text = data.decode()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [PATCH] cuda: scale the product" in text and "Before 10 us, after 5 us." in text
    assert f"diff --git a/{GDN} b/{GDN}" in text and "+    dst[0] = 2.0f * q[0] * k[0];" in text
    assert describe(data) == "cuda: scale the product"
    lock = locked(proj.vendor_dir)
    assert [(p.name, p.verdict) for p in lock.patches] == [("0001-scale.patch", "applied")]
    info = lock.info(GDN)
    assert info is not None and info.patched_by == ("0001-scale.patch",)
    assert check_vendor_dir(proj.vendor_dir) == []  # edits and lock agree: clean
    # sync at the pin applies the saved patch and reproduces the edit: nothing to write
    assert sync_project(proj, SyncRequest()).status == "unchanged"
    assert "2.0f * q[0]" in gdn(proj).read_text()


def test_save_refreshes_an_existing_patch_and_numbers_new_ones(proj: Config) -> None:
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 2.0f * q[0] * k[0];")
    assert cli(proj, "patch", "save", "scale", "-m", "cuda: scale\n\nkeep this body").exit_code == 0
    edit(proj, "case 64: break;", "case 64: case 128: break;")
    res = cli(proj, "patch", "save", "0001-scale.patch")  # refresh, description kept
    assert res.exit_code == 0 and "refreshed vendor/patches/0001-scale.patch" in res.output, res.output
    files = sorted(p.name for p in (proj.vendor_dir / "patches").glob("*.patch"))
    assert files == ["0001-scale.patch"]
    data = (proj.vendor_dir / "patches" / "0001-scale.patch").read_bytes()
    assert message_of(data) == "cuda: scale\n\nkeep this body"
    assert b"2.0f * q[0]" in data and b"case 128" in data
    edit(proj, "GGML_ABORT", "GGML_ABORT /* unsupported */ ")
    res = cli(proj, "patch", "save", "abort-note", "-m", "cuda: note why")
    assert res.exit_code == 0, res.output
    second = (proj.vendor_dir / "patches" / "0002-abort-note.patch").read_text()
    assert "unsupported" in second and "2.0f" not in second  # only the new edit: 0001 is its baseline
    assert [p.name for p in locked(proj.vendor_dir).patches] == ["0001-scale.patch", "0002-abort-note.patch"]
    assert check_vendor_dir(proj.vendor_dir) == []


def test_save_with_a_new_description_only_rewrites_the_message(proj: Config) -> None:
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 2.0f * q[0] * k[0];")
    assert cli(proj, "patch", "save", "scale", "-m", "old words").exit_code == 0
    before = (proj.vendor_dir / "patches" / "0001-scale.patch").read_text()
    res = cli(proj, "patch", "save", "scale", "-m", "new words\n\nbefore 9 us, after 3 us")
    assert res.exit_code == 0, res.output
    after = (proj.vendor_dir / "patches" / "0001-scale.patch").read_text()
    assert "Subject: [PATCH] new words" in after and "before 9 us" in after
    assert before.split("diff --git", 1)[1] == after.split("diff --git", 1)[1]  # the same change
    assert check_vendor_dir(proj.vendor_dir) == []
    # without -m there is nothing to refresh
    assert_one_line_refusal(proj, ["patch", "save", "scale"], 5, "no edits to save")


def test_save_refreshes_a_patch_that_a_later_patch_builds_on(proj: Config) -> None:
    """Issue 33 item 5: 0002 changes the line 0001 wrote. Refreshing 0001 (a new message, or a further edit
    of its own) diffs against the pin plus the patches before it, and 0002 is checked on top again."""
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 2.0f * q[0] * k[0];")
    assert cli(proj, "patch", "save", "scale", "-m", "cuda: scale").exit_code == 0
    edit(proj, "2.0f * q[0]", "2.0f * 0.5f * q[0]")
    assert cli(proj, "patch", "save", "half", "-m", "cuda: halve it").exit_code == 0
    patches = proj.vendor_dir / "patches"
    first, second = (patches / "0001-scale.patch").read_text(), (patches / "0002-half.patch").read_text()
    assert "-    dst[0] = 2.0f * q[0] * k[0];" in second  # 0002 builds on 0001
    res = cli(proj, "patch", "save", "scale", "-m", "cuda: scale the product\n\nbefore 9 us, after 3 us")
    assert res.exit_code == 0, res.output
    refreshed = (patches / "0001-scale.patch").read_text()
    assert "Subject: [PATCH] cuda: scale the product" in refreshed
    assert refreshed.split("diff --git", 1)[1] == first.split("diff --git", 1)[1]  # the same change
    assert (patches / "0002-half.patch").read_text() == second
    assert check_vendor_dir(proj.vendor_dir) == []
    # a further edit of 0001's own, away from what 0002 changes, goes into 0001
    edit(proj, "case 64: break;", "case 64: case 128: break;")
    res = cli(proj, "patch", "save", "0001-scale.patch")
    assert res.exit_code == 0 and "refreshed vendor/patches/0001-scale.patch" in res.output, res.output
    refreshed = (patches / "0001-scale.patch").read_text()
    assert "case 128" in refreshed and "+    dst[0] = 2.0f * q[0] * k[0];" in refreshed and "0.5f" not in refreshed
    assert (patches / "0002-half.patch").read_text() == second
    assert check_vendor_dir(proj.vendor_dir) == []
    assert sync_project(proj, SyncRequest()).status == "unchanged"  # the series reproduces vendor/ exactly
    # an edit of what 0002 changes cannot go into 0001: one line, nothing written
    edit(proj, "0.5f", "0.25f")
    assert_one_line_refusal(proj, ["patch", "save", "scale"], 5, "overlap what the later patch 0002-half.patch changes")


def test_save_by_number_refreshes_a_patch_a_later_one_builds_on(proj: Config) -> None:
    """Issue 33 item 5 as it was met: `patch save 0001 -m ...` in a series whose 0002 changes the line 0001
    wrote. The number designates 0001 (not a new patch named "0001"); only its message changes, 0002 stays
    byte for byte, and a number that names no patch is refused in one line."""
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 2.0f * q[0] * k[0];")
    assert cli(proj, "patch", "save", "scale", "-m", "cuda: scale").exit_code == 0
    edit(proj, "2.0f * q[0]", "2.0f * 0.5f * q[0]")
    assert cli(proj, "patch", "save", "half", "-m", "cuda: halve it").exit_code == 0
    patches = proj.vendor_dir / "patches"
    first, second = (patches / "0001-scale.patch").read_text(), (patches / "0002-half.patch").read_text()
    res = cli(proj, "patch", "save", "0001", "-m", "cuda: scale the product")
    assert res.exit_code == 0 and "refreshed vendor/patches/0001-scale.patch" in res.output, res.output
    assert sorted(p.name for p in patches.glob("*.patch")) == ["0001-scale.patch", "0002-half.patch"]
    refreshed = (patches / "0001-scale.patch").read_text()
    assert "Subject: [PATCH] cuda: scale the product" in refreshed
    assert refreshed.split("diff --git", 1)[1] == first.split("diff --git", 1)[1]
    assert (patches / "0002-half.patch").read_text() == second
    assert check_vendor_dir(proj.vendor_dir) == []
    assert sync_project(proj, SyncRequest()).status == "unchanged"
    assert_one_line_refusal(proj, ["patch", "save", "0042", "-m", "x"], 5, "no patch numbered 0042 in vendor/patches")
    assert cli(proj, "patch", "drop", "0002").exit_code == 0  # drop reads a number the same way
    assert sorted(p.name for p in patches.glob("*.patch")) == ["0001-scale.patch"]


def test_save_words_a_later_patch_that_no_longer_applies_for_the_save(proj: Config) -> None:
    """A later patch the series carries as already applied (0002 makes 0001's change again) stops applying
    once 0001 is refreshed: the refusal names it and the save, not a "new pin" sync would fix."""
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = q[0] * k[0];\n    // ours")
    assert cli(proj, "patch", "save", "note", "-m", "cuda: note").exit_code == 0
    patches = proj.vendor_dir / "patches"
    diff = (patches / "0001-note.patch").read_text().split("diff --git", 1)[1]
    (patches / "0002-same.patch").write_text("cuda: the same note\n\ndiff --git" + diff)
    assert sync_project(proj, SyncRequest()).status in ("synced", "unchanged")
    listed = cli(proj, "patch", "list")
    assert "0002-same.patch: already-upstream" in listed.output, listed.output
    edit(proj, "// ours", "// ours, reworded")
    assert_one_line_refusal(
        proj,
        ["patch", "save", "note"],
        5,
        "with 0001-note.patch saved, the later patch 0002-same.patch no longer applies on top of it",
    )
    res = cli(proj, "patch", "save", "note")
    assert "new pin" not in res.output and "re-run sync" not in res.output, res.output


@pytest.mark.parametrize("lands", ["after the write", "before the write"])
def test_ctrl_c_of_save_says_what_vendor_holds_read_back(
    proj: Config, monkeypatch: pytest.MonkeyPatch, lands: str
) -> None:
    """Issue 33 item 3: a Ctrl-C of `patch save` once planned says truthfully whether the patch was saved."""
    from toolkit.sync import patch_workflow as wf

    real = wf.execute_save

    def ctrl_c(plan: wf.SavePlan) -> NoReturn:
        if lands == "after the write":
            real(plan)
        raise KeyboardInterrupt

    monkeypatch.setattr(wf, "execute_save", ctrl_c)
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 2.0f * q[0] * k[0];")
    res = cli(proj, "patch", "save", "scale", "-m", "cuda: scale")
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    saved = (proj.vendor_dir / "patches" / "0001-scale.patch").exists()
    if lands == "after the write":
        assert saved and "vendor/ holds the saved vendor/patches/0001-scale.patch" in res.output, res.output
    else:
        assert not saved and "vendor/ is as it was: nothing was written" in res.output, res.output


def test_save_dry_run_writes_nothing(proj: Config) -> None:
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 3.0f;")
    before = tree_state(proj.vendor_dir)
    res = cli(proj, "patch", "save", "three", "-m", "x", "--dry-run", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["name"] == "0001-three.patch" and doc["files"] == [GDN] and doc["written"] is False
    assert tree_state(proj.vendor_dir) == before


# --- bad input: one line, nothing written ----------------------------------------------------------------


def test_save_without_edits_is_refused(proj: Config) -> None:
    assert_one_line_refusal(proj, ["patch", "save", "nothing", "-m", "x"], 5, "no edits to save")


def test_save_with_edits_outside_the_vendored_files_is_refused(proj: Config) -> None:
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 0;")
    (proj.vendor_dir / "ggml" / "src" / "ggml-cuda" / "mine.cuh").write_text("#pragma once\n")
    assert_one_line_refusal(proj, ["patch", "save", "x", "-m", "x"], 5, "edits outside the vendored files")


def test_save_on_a_dirty_pin_is_refused(proj: Config) -> None:
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 0;")
    (proj.vendor_dir / "patches" / "0001-unsynced.patch").write_text(
        make_patch("src/ggml-cuda/gated_delta_net.cuh", "a\n", "b\n")
    )
    assert_one_line_refusal(proj, ["patch", "save", "x", "-m", "x"], 4, "the pin is dirty")


def test_save_without_a_pin_or_with_a_bad_name_or_no_description_is_refused(
    tmp_path: Path, up: FixtureRepo, proj: Config
) -> None:
    bare = config.load(make_project(tmp_path / "bare", str(up.path)))
    assert_one_line_refusal(bare, ["patch", "save", "x", "-m", "x"], 4, "no pin")
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 0;")
    assert_one_line_refusal(proj, ["patch", "save", "../evil", "-m", "x"], 5, "is not a patch name")
    assert_one_line_refusal(proj, ["patch", "save", "new-one"], 5, "needs a description")
    assert_one_line_refusal(proj, ["patch", "save", "new-one", "-m", "  "], 5, "description is empty")


# --- list ------------------------------------------------------------------------------------------------


def _save(cfg: Config, name: str, old: str, new: str, msg: str) -> None:
    edit(cfg, old, new)
    res = cli(cfg, "patch", "save", name, "-m", msg)
    assert res.exit_code == 0, res.output


def test_list_health_at_the_pin_and_at_other_revisions_changes_nothing(proj: Config) -> None:
    # 0001 is what upstream did in v1b; 0002 edits the launcher line that v2 rewrites.
    _save(proj, "tweak", "q[0] * k[0]", "q[0] * k[0] + 1.0f", "cuda: add one")
    _save(proj, "stream", "cudaStream_t stream", "cudaStream_t s", "cuda: rename the stream")
    before = tree_state(proj.vendor_dir)
    res = cli(proj, "patch", "list")
    assert res.exit_code == 0, res.output
    assert "0001-tweak.patch: applies — cuda: add one" in res.output
    assert "0002-stream.patch: applies — cuda: rename the stream" in res.output
    res = cli(proj, "patch", "list", "--rev", "v1b")
    assert "0001-tweak.patch: already-upstream — cuda: add one" in res.output, res.output
    assert "0002-stream.patch: applies" in res.output
    res = cli(proj, "patch", "list", "--rev", "v2", "--json")
    doc = json.loads(res.output)
    health = {p["name"]: (p["health"], p["detail"]) for p in doc["patches"]}
    assert health["0001-tweak.patch"] == ("already-upstream", "")
    assert health["0002-stream.patch"][0] == "conflicts"
    assert health["0002-stream.patch"][1].startswith("hunk #1 `@@ -") and GDN in health["0002-stream.patch"][1]
    assert tree_state(proj.vendor_dir) == before


def test_sync_to_a_rev_where_a_saved_patch_conflicts_stops_naming_patch_and_hunk(proj: Config) -> None:
    _save(proj, "stream", "cudaStream_t stream", "cudaStream_t s", "cuda: rename the stream")
    before = tree_state(proj.vendor_dir)
    res = cli(proj, "sync", "--rev", "v2")
    assert res.exit_code == 5
    assert "0002" not in res.output and "0001-stream.patch conflicts: hunk #1" in res.output and GDN in res.output
    assert tree_state(proj.vendor_dir) == before


def test_sync_reports_a_patch_upstream_absorbed_and_the_drift_report_lists_patches(proj: Config) -> None:
    _save(proj, "tweak", "q[0] * k[0]", "q[0] * k[0] + 1.0f", "cuda: add one")
    res = cli(proj, "sync", "--rev", "v1b")
    assert res.exit_code == 0, res.output
    assert "patch 0001-tweak.patch: already-upstream" in res.output
    assert "0001-tweak.patch: already-upstream — cuda: add one" in res.output  # the drift summary line
    reports = sorted((proj.build_dir / "reports").glob("drift-*.md"))
    md = reports[-1].read_text()
    assert "## Our patches at the new pin" in md and "- `0001-tweak.patch`: already-upstream — cuda: add one" in md
    js = json.loads(reports[-1].with_suffix(".json").read_text())
    assert js["patches"] == [
        {"name": "0001-tweak.patch", "verdict": "already-upstream", "description": "cuda: add one"}
    ]


# --- drop ------------------------------------------------------------------------------------------------


def test_drop_removes_and_unapplies(proj: Config) -> None:
    _save(proj, "tweak", "q[0] * k[0]", "q[0] * k[0] + 1.0f", "cuda: add one")
    res = cli(proj, "patch", "drop", "tweak")
    assert res.exit_code == 0 and "dropped vendor/patches/0001-tweak.patch" in res.output, res.output
    assert not (proj.vendor_dir / "patches" / "0001-tweak.patch").exists()
    assert gdn(proj).read_text() == GDN_CU_V1
    assert locked(proj.vendor_dir).patches == () and check_vendor_dir(proj.vendor_dir) == []


def test_drop_refuses_unknown_names_and_unsaved_edits(proj: Config) -> None:
    _save(proj, "tweak", "q[0] * k[0]", "q[0] * k[0] + 1.0f", "cuda: add one")
    assert_one_line_refusal(proj, ["patch", "drop", "nope"], 5, "no patch named 'nope'")
    edit(proj, "case 64", "case 32")
    assert_one_line_refusal(proj, ["patch", "drop", "tweak"], 4, "unsaved edits")


# --- descriptions in status and the card -------------------------------------------------------------------


def test_status_and_card_show_descriptions(proj: Config) -> None:
    _save(proj, "tweak", "q[0] * k[0]", "q[0] * k[0] + 1.0f", "cuda: add one")
    doc = json.loads(cli(proj, "status", "--json").output)
    assert doc["patches"] == [
        {"name": "0001-tweak.patch", "verdict": "applied", "state": "applied", "description": "cuda: add one"}
    ]
    assert "patch   0001-tweak.patch: applied — cuda: add one" in cli(proj, "status").output
    from toolkit.publish.card import render_card

    card = render_card(proj, "org/pkg", [], read_lock(proj.vendor_dir))
    assert "- `0001-tweak.patch`: cuda: add one (sha256 `" in card


def test_describe_plain_diffs_and_folded_subjects() -> None:
    assert describe(b"Make it faster\n\n--- a/x\n+++ b/x\n") == "Make it faster"
    assert describe(b"--- a/x\n+++ b/x\n") == ""
    folded = b"From 0 Mon\nFrom: a <b>\nDate: now\nSubject: [PATCH] a long\n subject line\n\nbody\n---\n x | 1 +\n"
    assert describe(folded) == "a long subject line"
    assert message_of(folded) == "a long subject line\n\nbody"


# --- save: odd files and odd edits ---------------------------------------------------------------------


def test_save_refuses_a_symlink_out_of_the_tree(proj: Config, tmp_path: Path) -> None:
    outside = tmp_path / "outside.cu"
    outside.write_text(gdn(proj).read_text() + "// a secret from outside the tree\n")
    gdn(proj).unlink()
    gdn(proj).symlink_to(outside)
    assert_one_line_refusal(proj, ["patch", "save", "x", "-m", "x"], 4, "is a symbolic link")
    assert not list((proj.vendor_dir / "patches").glob("*.patch"))


def test_save_refuses_a_directory_in_place_of_a_vendored_file(proj: Config) -> None:
    gdn(proj).unlink()
    gdn(proj).mkdir()
    assert_one_line_refusal(proj, ["patch", "save", "x", "-m", "x"], 4, "is a directory")


def test_save_refuses_a_fifo_without_hanging(proj: Config) -> None:
    import os

    gdn(proj).unlink()
    os.mkfifo(gdn(proj))
    assert_one_line_refusal(proj, ["patch", "save", "x", "-m", "x"], 4, "is a named pipe")


def test_save_refuses_a_name_too_long_for_a_file(proj: Config) -> None:
    edit(proj, "dst[0] = q[0] * k[0];", "dst[0] = 2.0f * q[0] * k[0];")
    assert_one_line_refusal(proj, ["patch", "save", "a" * 300, "-m", "x"], 5, "is too long")


@pytest.mark.parametrize("kind", ["crlf", "binary"])
def test_save_keeps_crlf_and_binary_edits_exactly(proj: Config, kind: str) -> None:
    if kind == "crlf":
        new = gdn(proj).read_bytes().replace(b"\n", b"\r\n")
    else:
        new = gdn(proj).read_bytes() + b"\x00\xff\xfe binary \x00\r\n\x80"
    gdn(proj).write_bytes(new)
    res = cli(proj, "patch", "save", kind, "-m", f"a {kind} edit")
    assert res.exit_code == 0, res.output
    assert gdn(proj).read_bytes() == new and check_vendor_dir(proj.vendor_dir) == []
    # and the saved patch re-creates the edit from the pristine upstream: a fresh sync gives the same bytes
    (proj.vendor_dir / "ggml").rename(proj.vendor_dir.parent / "old-ggml")
    assert sync_project(proj, SyncRequest()).status == "synced"
    assert gdn(proj).read_bytes() == new
