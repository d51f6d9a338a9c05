"""The GPU session scripts (benchmarks/gpu_*.sh) parse, and the shared step runner they source
(benchmarks/gpu_common.sh) keeps its promises: a step's limit trimmed to the deadline, a step past it skipped
(99), the command's exit code returned (124 when its limit stops it), the log kept and its tail filtered."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "benchmarks").glob("gpu_*.sh"))
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _session(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess:
    script = f'set -uo pipefail\ncd "{REPO}"\nRESULTS="{tmp_path}/res"\nsource benchmarks/gpu_common.sh\n{body}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **env})


def test_step_runs_logs_and_returns_the_exit_code(tmp_path: Path) -> None:
    proc = _session(tmp_path, 'step ok 30 bash -c "echo one; echo two; exit 3"; echo "rc=$?"', DEADLINE_S="600")
    assert "=== ok (limit 30s)" in proc.stdout
    assert "one\ntwo\nok exit code 3" in proc.stdout
    assert "rc=3" in proc.stdout
    assert (tmp_path / "res" / "ok.log").read_text() == "one\ntwo\n"
    assert "ok exit code 3" in (tmp_path / "res" / "session.log").read_text()


def test_step_limit_is_trimmed_to_the_deadline_and_skipped_past_it(tmp_path: Path) -> None:
    body = 'step trimmed 500 true; step stopped 1 sleep 5; echo "rc=$?"; SECONDS=100; step late 30 true; echo "rc=$?"'
    proc = _session(tmp_path, body, DEADLINE_S="100")
    assert "=== trimmed (limit 100s)" in proc.stdout
    assert "stopped exit code 124" in proc.stdout and "rc=124" in proc.stdout.split("late")[0]
    assert "late: skipped (deadline)" in proc.stdout
    assert proc.stdout.rstrip().endswith("rc=99")
    assert not (tmp_path / "res" / "late.log").exists()


def test_step_show_filters_the_tail(tmp_path: Path) -> None:
    body = 'STEP_SHOW="^ROW" TAIL=1 step grid 30 bash -c "echo ROW 1; echo noise; echo ROW 2"'
    proc = _session(tmp_path, body, DEADLINE_S="600")
    assert "ROW 2\ngrid exit code 0" in proc.stdout
    assert "ROW 1" not in proc.stdout and "noise" not in proc.stdout


def test_install_wheels_without_wheels_puts_the_checkout_on_the_path(tmp_path: Path) -> None:
    proc = _session(tmp_path, 'install_wheels; echo "path=$PYTHONPATH"')
    assert f"path={REPO}" in proc.stdout
    assert not (tmp_path / "res" / "pip.log").exists()


# a python3 on PATH standing in for torch (this GPU is sm_90) and for gguf_local_build.py's link: it records the
# objects it was given and fails for an output folder named *bad*
FAKE_PYTHON = """#!/bin/bash
if [ "$1" = "-c" ]; then echo 90; exit 0; fi
while [ $# -gt 0 ]; do [ "$1" = "--out" ] && out=$2; shift; done
case "$out" in *bad*) echo "undefined symbol"; exit 1;; esac
(cd "$out/obj-sm90" && for f in *.o; do echo "$f $(cat "$f")"; done) >"$out/linked.txt"; mkdir -p "$out/pkg"
"""


def test_gguf_link_builds_links_the_build_under_test_and_each_variant_beside_it(tmp_path: Path) -> None:
    bin_dir, objs, alt, builds = tmp_path / "bin", tmp_path / "objs", tmp_path / "alt", tmp_path / "builds"
    for d in (bin_dir, objs, alt, builds):
        d.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    (objs / "mmvq.o").write_text("new")
    (objs / "convert.o").write_text("new")
    (alt / "mmvq.o").write_text("base")
    body = (
        f'gguf_link_builds "{objs}" base="{alt}" bad="{alt}"; '
        'echo "arch=$ARCH"; echo "vlist=$VLIST"; echo "path=$GGUF_KERNELS_PATH"'
    )
    proc = _session(tmp_path, body, PATH=f"{bin_dir}:/usr/bin:/bin", GGUF_BUILDS=str(builds))
    assert proc.returncode == 0, proc.stderr
    assert "arch=90" in proc.stdout
    assert f"vlist= base={builds}/gguf-base/pkg\n" in proc.stdout  # the failed variant is left out
    assert "variant bad: link failed" in proc.stdout
    assert f"path={builds}/gguf-build/pkg" in proc.stdout
    assert (builds / "gguf-build" / "linked.txt").read_text() == "convert.o new\nmmvq.o new\n"
    # a variant is the build under test with its own objects in place of those
    assert (builds / "gguf-base" / "linked.txt").read_text() == "convert.o new\nmmvq.o base\n"
