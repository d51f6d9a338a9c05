"""`outdated` and `update` on llama.cpp-shaped replays pinned at an old commit with master ahead (issue 31):
the commits since the pin, the gated_delta_net drift, the patch health by a three-way apply; `update --latest`
moves the pin to a tree whose `sync --check`, `render --check` and `ci --check` are clean, with a report naming
every moved op; a conflicting patch stops it with vendor/ unchanged.

The miniature replay (our own miniature ggml) always runs; the real one replays ggml's own history when
GGML_VENDOR_REAL_UPSTREAM points at a ggml clone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.fixture_repos import git, locked, tree_state
from tests.helpers.replay import (
    FA,
    GDN,
    SCALE_NEW,
    SCALE_OLD,
    cli,
    gdn_at,
    has_commits,
    mini_history,
    patch_of,
    pinned_project,
    real_history,
)
from toolkit.core.errors import Outdated, PatchError, UpstreamError
from toolkit.core.lock import read_lock

pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("replay") / "llama.cpp"
    return repo, mini_history(repo)


def _patches(repo: Path, pins: dict[str, str]) -> dict[str, str]:
    """Three patches made at p0: one upstream never touches (applies as it is), one two lines from the state
    transpose (its context moved: only a three-way apply carries it), one that upstream makes itself at p3."""
    gdn = gdn_at(repo, pins["p0"])
    fa = git(repo, "show", f"{pins['p0']}:ggml/{FA}") + "\n"
    assert "    float s[S_v];\n" in gdn
    return {
        "0001-fa-comment.patch": patch_of(FA, fa, "// ours: a note on the FA entry\n" + fa, "cuda: fa: a note"),
        "0002-gdn-state-comment.patch": patch_of(
            GDN,
            gdn,
            gdn.replace("    float s[S_v];\n", "    float s[S_v];  // ours: the column in registers\n"),
            "cuda: gdn: say where the state lives",
        ),
        "0003-gdn-scale-once.patch": patch_of(GDN, gdn, gdn.replace(SCALE_OLD, SCALE_NEW), "cuda: gdn: scale once"),
    }


@pytest.fixture
def project(tmp_path: Path, history: tuple[Path, dict[str, str]]) -> Path:
    repo, pins = history
    return pinned_project(tmp_path / "proj", repo, pins["p0"], _patches(repo, pins))


def test_outdated_lists_the_commits_the_drift_and_the_patch_health(
    project: Path, history: tuple[Path, dict[str, str]]
) -> None:
    repo, pins = history
    res = cli(project, "outdated", "--skip", "torch", "--skip", "clients", "-p", "ggml-attn-kernels", "--json")
    assert res.returncode == Outdated.exit_code, res.stderr
    doc = json.loads(res.stdout)
    up = doc["upstream"]
    assert up["pin"] == pins["p0"] and up["head"] == pins["p3"] and up["head_rev"] == "master"
    # the README commit touches no closure; the other two do, newest first, with their dates
    assert [c["subject"] for c in up["commits"]] == [
        "cuda : scale the output once (mini/3)",
        "graph : transpose the state (mini/1)",
    ]
    assert [c["date"][:10] for c in up["commits"]] == ["2026-10-05", "2026-09-02"]
    assert {"op": "ggml-attn-kernels:gated_delta_net", "change": "body changed: review semantics"} in up["changed_ops"]
    assert all(o["op"] != "flash_attn" for o in up["changed_ops"])
    verdicts = {p["name"]: p["verdict"] for p in doc["patches"]}
    assert verdicts == {
        "0001-fa-comment.patch": "applies",
        "0002-gdn-state-comment.patch": "rebased",
        "0003-gdn-scale-once.patch": "already-upstream",
    }
    assert doc["moved"] == ["upstream", "patches"] and doc["current"] is False
    assert "something moved: ggml-attn-kernels: upstream, patches" in res.stderr  # the one line, exit 12
    # read only: nothing in the project changed
    assert git(project, "status", "--porcelain") == ""


def test_outdated_is_current_at_the_head_and_exits_0(tmp_path: Path, history: tuple[Path, dict[str, str]]) -> None:
    repo, pins = history
    root = pinned_project(tmp_path / "p", repo, pins["p3"])
    res = cli(root, "outdated", "--skip", "torch", "--skip", "clients")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "upstream: current" in res.stdout and "everything is current" in res.stdout


def test_update_latest_moves_the_pin_rebases_and_renders_a_clean_tree(
    project: Path, history: tuple[Path, dict[str, str]]
) -> None:
    repo, pins = history
    body = project / "body.md"
    res = cli(project, "update", "--latest", "--report-file", str(body))
    assert res.returncode == 0, res.stdout + res.stderr
    lock = read_lock(project / "vendor")
    assert lock is not None and lock.commit == pins["p3"] and lock.rev == "master"
    for check in (["sync", "--check"], ["render", "--check"], ["ci", "--check"]):
        done = cli(project, *check)
        assert done.returncode == 0, (check, done.stdout + done.stderr)
    patches = sorted(p.name for p in (project / "vendor" / "patches").glob("*.patch"))
    assert patches == ["0001-fa-comment.patch", "0002-gdn-state-comment.patch"]  # 0003 dropped: upstream has it
    rebased = (project / "vendor" / "patches" / "0002-gdn-state-comment.patch").read_text()
    assert "cuda: gdn: say where the state lives" in rebased
    vendored = (project / "vendor" / "ggml" / GDN).read_text()
    assert "// ours: the column in registers" in vendored and "s_in[i * S_v]" in vendored  # ours + upstream's
    text = body.read_text()
    assert text == (project / "build" / "reports" / f"update-{pins['p0'][:12]}-{pins['p3'][:12]}.md").read_text()
    assert "gated_delta_net: cuda kernel gated_delta_net_cuda: body changed: review semantics" in text
    assert "graph : transpose the state (mini/1)" in text and "docs : readme" not in text
    assert "| `0003-gdn-scale-once.patch` | dropped: upstream carries it |" in text
    assert "| `0002-gdn-state-comment.patch` | rebased (three-way)" in text
    assert "- [ ] bodies changed for ggml-attn-kernels:gated_delta_net" in text


def test_a_conflicting_patch_stops_the_update_and_changes_nothing(
    tmp_path: Path, history: tuple[Path, dict[str, str]]
) -> None:
    repo, pins = history
    gdn = gdn_at(repo, pins["p0"])
    clash = patch_of(
        GDN, gdn, gdn.replace("        s[i] = s_in[i];\n", "        s[i] = 2.0f * s_in[i];\n"), "cuda: gdn: x2"
    )
    root = pinned_project(tmp_path / "proj", repo, pins["p0"], {"0001-gdn-clash.patch": clash})
    before = tree_state(root / "vendor")
    res = cli(root, "update", "--latest")
    assert res.returncode == PatchError.exit_code, res.stdout + res.stderr
    err = res.stderr.strip().splitlines()[-1]
    assert "patch 0001-gdn-clash.patch conflicts" in err and f"of {GDN}" in err and "hunk #1" in err
    assert "vendor/ was not changed" in err
    assert tree_state(root / "vendor") == before
    assert not (root / "build" / "reports").exists()
    # outdated names it too, and exits 12 (it is a report, not a refusal)
    res = cli(root, "outdated", "--skip", "torch", "--skip", "clients", "-p", "ggml-attn-kernels")
    assert res.returncode == Outdated.exit_code
    assert "0001-gdn-clash.patch: conflicts at hunk #1" in res.stdout


@pytest.mark.parametrize("rev", ["nosuchbranch", "--upload-pack=touch", "HEAD~1", "0123456789abcdef0123"])
def test_a_rev_that_is_no_commit_is_one_line_exit_3_nothing_written(project: Path, rev: str) -> None:
    before = tree_state(project)
    res = cli(project, "update", f"--rev={rev}")
    assert res.returncode == UpstreamError.exit_code, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert tree_state(project) == before


def test_an_unreachable_upstream_is_one_line_exit_3(project: Path, tmp_path: Path) -> None:
    before = tree_state(project)
    for args in (["outdated", "--upstream", str(tmp_path / "gone")], ["update", "--upstream", str(tmp_path / "gone")]):
        extra = ["--skip", "torch", "-p", "ggml-attn-kernels"] if args[0] == "outdated" else []
        res = cli(project, *args, *extra)
        assert res.returncode == UpstreamError.exit_code, res.stdout + res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    # a URL nobody answers (a closed loopback port): the fetch fails in one line too
    res = cli(
        project, "outdated", "-p", "ggml-attn-kernels", "--upstream", "http://127.0.0.1:9/ggml.git", "--skip", "torch"
    )
    assert res.returncode == UpstreamError.exit_code, res.stdout + res.stderr
    assert "cannot reach upstream" in res.stderr
    assert tree_state(project) == before


def test_update_dry_run_plans_and_writes_nothing(project: Path, history: tuple[Path, dict[str, str]]) -> None:
    repo, pins = history
    before = tree_state(project)
    res = cli(project, "update", "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["dry_run"] and doc["target"] == pins["p3"]
    assert [p["verdict"] for p in doc["patches"]] == ["applies", "rebased", "already-upstream"]
    assert tree_state(project) == before


# --- the real replay -------------------------------------------------------------------------------------

REAL = ("7b28f950", "390c2f40", "ed6ad30f", "d99724f2")  # pinned at the first, master at the snapshot's HEAD


@pytest.mark.real_upstream
def test_real_replay_outdated_then_update(tmp_path: Path) -> None:
    real = os.environ.get("GGML_VENDOR_REAL_UPSTREAM")
    if not real:
        pytest.skip("GGML_VENDOR_REAL_UPSTREAM is not set (point it at a ggml clone to replay real history)")
    missing = has_commits(Path(real), REAL)
    if missing:
        pytest.skip(f"GGML_VENDOR_REAL_UPSTREAM lacks the replay commits {missing}")
    repo, pins, ggml_of = real_history(Path(real), REAL, tmp_path / "llama.cpp")
    root = pinned_project(tmp_path / "proj", repo, pins[0])
    res = cli(root, "outdated", "--skip", "torch", "--skip", "clients", "-p", "ggml-attn-kernels", "--json")
    assert res.returncode == Outdated.exit_code, res.stderr
    up = json.loads(res.stdout)["upstream"]
    assert [ggml_of[c["sha"]][:8] for c in up["commits"]] == ["d99724f2", "ed6ad30f", "390c2f40"]
    ops = {o["op"]: o["change"] for o in up["changed_ops"]}
    # the snapshot order (390c2f40) changed bodies, and ed6ad30f a parameter list: breaking wins
    assert ops["ggml-attn-kernels:gated_delta_net"] == "signature changed (breaking)"
    res = cli(root, "update", "--latest", "--report-file", str(tmp_path / "body.md"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert locked(root / "vendor").commit == pins[-1]
    for check in (["sync", "--check"], ["render", "--check"]):
        done = cli(root, *check)
        assert done.returncode == 0, (check, done.stdout + done.stderr)
    text = (tmp_path / "body.md").read_text()
    assert "gated_delta_net: cuda kernel gated_delta_net_cuda: signature changed (breaking)" in text
    for moved in (
        json.loads(cli(root, "outdated", "--skip", "torch", "--skip", "clients", "--json").stdout or "{}")
        .get("packages", {})
        .values()
    ):
        assert moved["upstream"]["pin"] == moved["upstream"]["head"]


def test_a_url_upstream_is_fetched_with_its_history_into_the_tool_cache(
    project: Path, history: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    repo, pins = history
    git(repo, "config", "uploadpack.allowFilter", "true")  # what a hosting server allows: filtered fetches
    before = tree_state(project)
    url = f"file://{repo}"
    res = cli(
        project,
        "outdated",
        "-p",
        "ggml-attn-kernels",
        "--upstream",
        url,
        "--skip",
        "torch",
        "--skip",
        "clients",
        "--json",
    )
    assert res.returncode == Outdated.exit_code, res.stdout + res.stderr
    up = json.loads(res.stdout)["upstream"]
    assert up["head"] == pins["p3"] and len(up["commits"]) == 2
    assert {"op": "ggml-attn-kernels:gated_delta_net", "change": "body changed: review semantics"} in up["changed_ops"]
    assert tree_state(project) == before  # only the tool's cache was written


@pytest.mark.parametrize("lands", ["before vendor/", "after vendor/", "while printing"])
def test_a_ctrl_c_of_update_says_how_far_it_got_read_back(
    project: Path, history: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch, lands: str
) -> None:
    """Issue 33 item 3: a Ctrl-C once update's plan is made says which pin vendor/ holds and whether the
    report was written, read back from disk, never "previous state kept" after vendor/ moved."""
    from typer.testing import CliRunner

    from toolkit.cli import app
    from toolkit.outdated import update as update_stage

    repo, pins = history

    def ctrl_c(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    target = {"before vendor/": "replace_vendor", "after vendor/": "_render_all"}.get(lands)
    if target is not None:
        monkeypatch.setattr(update_stage, target, ctrl_c)
    else:
        monkeypatch.setattr(update_stage.Report, "lines", ctrl_c)
    res = CliRunner().invoke(app, ["update", "--latest", "-C", str(project)])
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]
    assert last.startswith("interrupted:"), res.output
    old, new = pins["p0"][:12], pins["p3"][:12]
    expected = {
        "before vendor/": f"nothing was updated: vendor/ kept its pin {old} and no matrix changed (read back from disk)",
        "after vendor/": f"the update stopped part way: vendor/ moved to {new} (master); the sources were not all "
        "rendered and no report was written (read back from disk)",
        "while printing": f"the update had completed: vendor/ is at {new} (master), the report is in "
        f"{project / 'build' / 'reports' / f'update-{old}-{new}.md'} (read back from disk) — nothing to undo",
    }[lands]
    assert expected in last, res.output
    lock = read_lock(project / "vendor")
    assert lock is not None and lock.commit == (pins["p0"] if lands == "before vendor/" else pins["p3"])
