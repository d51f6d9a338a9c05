"""A killed build (SIGKILL of its process group: no handler runs) leaves no compiler running and no scratch
behind after the next run (issue 20 item 17). The GPU-free part checks the rules; the slow part kills a
real nvcc build."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.build.cache import clean_dead_scratch, scratch_dir
from toolkit.build.local import descendants, spawn_compiler

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "build_kernel"


def test_compilers_run_in_the_builds_process_group(tmp_path):
    proc = spawn_compiler(["sh", "-c", "ps -o pgid= -o sid= -p $$"], tmp_path, tmp_path)
    out, _ = proc.communicate(timeout=30)
    pgid, sid = (int(x) for x in out.split())
    assert (pgid, sid) == (os.getpgid(0), os.getsid(0))  # a kill of our group reaches it


def test_compiler_temp_files_go_to_the_step_scratch(tmp_path):
    proc = spawn_compiler(["sh", "-c", 'echo "$TMPDIR"'], tmp_path, tmp_path / "scratch")
    assert proc.communicate(timeout=30)[0].strip() == str(tmp_path / "scratch")  # nvcc's tmpxft files


def test_scratch_of_dead_runs_is_removed_and_live_ones_kept(tmp_path):
    mine = scratch_dir(tmp_path, "obj-0123")
    assert mine.name.startswith(f"obj-0123.{os.getpid()}-")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"obj-4567.{dead.pid}-abcd").mkdir()
    (tmp_path / "obj-89ab.k3j2l1").mkdir()  # an older version's unnamed leftover
    assert clean_dead_scratch(tmp_path) == 2
    assert [p.name for p in tmp_path.iterdir()] == [mine.name]


def test_descendants_are_found_deepest_first():
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(descendants(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(descendants(proc.pid)) == 2
    finally:
        for pid in (*descendants(proc.pid), proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.wait()


def _compilers_of(marker: str) -> list[str]:
    found = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        if cmd.parent.name == str(os.getpid()):
            continue
        try:
            text = cmd.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in text:
            found.append(text[:200])
    return found


@pytest.mark.slow
def test_sigkill_of_the_build_group_stops_its_compilers_and_the_next_run_cleans_up(tmp_path):
    from tests.helpers.machine import local_cuda_build_unavailable

    why = local_cuda_build_unavailable()
    if why:
        pytest.skip(why)
    proj = tmp_path / "p"
    shutil.copytree(FIXTURE, proj)
    cache = tmp_path / "cache"
    env = dict(os.environ, GGML_VENDOR_BUILD_CACHE=str(cache))
    cmd = [sys.executable, "-m", "toolkit.cli", "build", "-C", str(proj), "-j", "2"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _compilers_of(str(cache / "tmp")):
        time.sleep(0.1)
    assert _compilers_of(str(cache / "tmp")), "the build never started a compiler"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1)
    assert _compilers_of(str(cache / "tmp")) == []  # nothing runs on unseen
    assert any((cache / "tmp").iterdir())  # the killed run's scratch is there ...
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert list((cache / "tmp").iterdir()) == []  # ... until the next run
    assert not list((proj / "build").glob(".*"))
