"""Issue 33 item 2 for `outdated` and `update`: a hostile upstream's commit subject (an SGR colour, an OSC 8
hyperlink ended by ST, an OSC 0 window title ended by BEL) reaches neither the terminal nor the update report
(the pull request's body) raw; it is shown with its escape characters spelled out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.fixture_repos import git
from tests.helpers.replay import GDN, mini_history, pinned_project
from toolkit.core.errors import Outdated

pytestmark = pytest.mark.usefixtures("isolated_upstream_cache")

HOSTILE = "cuda : \x1b[31mred\x1b[0m \x1b]8;;http://x\x1b\\a link\x1b]8;;\x1b\\ \x1b]0;title\x07 (mini/4)"
SPELLED = "cuda : \\x1b[31mred\\x1b[0m \\x1b]8;;http://x\\x1b\\a link\\x1b]8;;\\x1b\\ \\x1b]0;title\\x07 (mini/4)"


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GGML_VENDOR_NO_FSYNC": "1"}
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args, "-C", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


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
