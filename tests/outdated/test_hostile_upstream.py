"""Issue 33 for `outdated` and `update` on a hostile or unusual upstream (a llama.cpp-shaped replay):

- item 1: a revision with git submodules (gitlinks at the root and beside the kernels) is surveyed and updated
  to like any other (the submodules are not part of the closure); one whose kernel includes a file inside a
  submodule is refused in one line, exit 3;
- item 2: a commit subject with an SGR colour, an OSC 8 hyperlink ended by ST and an OSC 0 window title ended
  by BEL reaches neither the terminal nor the update report (the pull request's body) raw; it is shown with
  its escape characters spelled out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fixture_repos import git
from tests.helpers.replay import GDN, cli, mini_history, pinned_project
from toolkit.core.errors import Outdated, UpstreamError

pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")

HOSTILE = "cuda : \x1b[31mred\x1b[0m \x1b]8;;http://x\x1b\\a link\x1b]8;;\x1b\\ \x1b]0;title\x07 (mini/4)"
SPELLED = "cuda : \\x1b[31mred\\x1b[0m \\x1b]8;;http://x\\x1b\\a link\\x1b]8;;\\x1b\\ \\x1b]0;title\\x07 (mini/4)"


def assert_escaped(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text, repr(text)
    assert SPELLED in text, text


def test_outdated_and_the_update_report_spell_out_a_hostile_subject(tmp_path: Path) -> None:
    repo = tmp_path / "llama.cpp"
    pins = mini_history(repo)
    gdn = repo / "ggml" / GDN
    gdn.write_text(gdn.read_text() + "// a change in the closure\n")
    git(repo, "commit", "-q", "--no-gpg-sign", "-am", HOSTILE)
    assert git(repo, "log", "-1", "--format=%s") == HOSTILE  # the raw bytes are in the upstream
    root = pinned_project(tmp_path / "proj", repo, pins["p3"])

    res = cli(root, "outdated", "--skip", "torch", "--skip", "clients")
    assert res.returncode == Outdated.exit_code, res.stdout + res.stderr
    assert_escaped(res.stdout)
    assert "\x1b" not in res.stderr and "\x07" not in res.stderr

    body = tmp_path / "body.md"
    res = cli(root, "update", "--latest", "--report-file", str(body))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "\x1b" not in res.stdout + res.stderr and "\x07" not in res.stdout + res.stderr
    assert_escaped(body.read_text())
    reports = sorted((root / "build").rglob("*.md"))
    assert {p.name.split("-")[0] for p in reports} == {"update", "drift"}, reports
    for report in reports:
        assert_escaped(report.read_text())


def test_outdated_and_update_skip_submodules_and_refuse_an_include_into_one(tmp_path: Path) -> None:
    repo = tmp_path / "llama.cpp"
    pins = mini_history(repo)
    gdn = repo / "ggml" / GDN
    gdn.write_text(gdn.read_text() + "// a change in the closure\n")
    git(repo, "add", "-A")
    # `git add` would drop a gitlink without its checkout: the index is written directly.
    for link in ("third_party/vendored", "ggml/src/ggml-cuda/sub"):
        git(repo, "update-index", "--add", "--cacheinfo", f"160000,{pins['p0']},{link}")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "add submodules (mini/4)")
    with_submodules = git(repo, "rev-parse", "HEAD")
    assert git(repo, "ls-tree", "HEAD", "third_party/vendored").startswith("160000 commit")
    git(repo, "checkout", "-q", "-b", "include-into-submodule")
    gdn.write_text('#include "sub/extra.cuh"\n' + gdn.read_text())
    git(repo, "add", str(gdn))  # not `commit -a`: it would drop the gitlinks, which have no checkout
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "cuda : include a header of a submodule (mini/5)")
    assert "160000 commit" in git(repo, "ls-tree", "-r", "HEAD", "ggml/src/ggml-cuda/sub")
    git(repo, "checkout", "-q", "master")
    root = pinned_project(tmp_path / "proj", repo, pins["p3"])

    res = cli(root, "outdated", "--skip", "torch", "--skip", "clients")
    assert res.returncode == Outdated.exit_code, res.stdout + res.stderr
    assert "add submodules (mini/4)" in res.stdout and "Traceback" not in res.stderr
    for cmd in ("outdated", "update"):
        res = cli(root, cmd, "--rev", "include-into-submodule")
        assert res.returncode == UpstreamError.exit_code, res.stdout + res.stderr
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "lies inside the git submodule ggml/src/ggml-cuda/sub" in lines[0], res.stderr
    res = cli(root, "update", "--latest")
    assert res.returncode == 0, res.stdout + res.stderr
    assert f'commit = "{with_submodules}"' in (root / "vendor" / "UPSTREAM").read_text()
    assert not (root / "vendor" / "ggml" / "src" / "ggml-cuda" / "sub").exists()
    done = cli(root, "sync", "--check")
    assert done.returncode == 0, done.stdout + done.stderr
