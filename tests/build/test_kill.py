"""A killed build (SIGKILL of its process group: no handler runs) leaves no compiler running and no scratch
behind after the next run (issue 20 item 17), and build/<variant>/ and a provisioned install are the old
tree or the new one whichever toolkit.core.fs checkpoint the kill lands on (issue 18 item 4). The GPU-free
part checks the rules and kills the real executor against simulated compilers; the slow part kills a real
nvcc build."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import BUILD_KERNEL_OUT, copy_build_kernel
from tests.helpers.kill import run_killed_at
from toolkit.build import provision as pv
from toolkit.build.cache import scratch_prefix
from toolkit.build.local import descendants, spawn_compiler
from toolkit.build.outdir import clean_stale_stages
from toolkit.core import fs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "build_kernel"


def test_compilers_run_in_the_builds_process_group(tmp_path: Path) -> None:
    proc = spawn_compiler(["sh", "-c", "ps -o pgid= -o sid= -p $$"], tmp_path, tmp_path)
    out, _ = proc.communicate(timeout=30)
    pgid, sid = (int(x) for x in out.split())
    assert (pgid, sid) == (os.getpgid(0), os.getsid(0))  # a kill of our group reaches it


def test_compiler_temp_files_go_to_the_step_scratch(tmp_path: Path) -> None:
    proc = spawn_compiler(["sh", "-c", 'echo "$TMPDIR"'], tmp_path, tmp_path / "scratch")
    assert proc.communicate(timeout=30)[0].strip() == str(tmp_path / "scratch")  # nvcc's tmpxft files


def test_scratch_of_dead_runs_is_removed_and_live_ones_kept(tmp_path: Path) -> None:
    """The executor's step scratch (toolkit.core.fs names it) and its start-up cleanup of <cache>/tmp."""
    mine = fs.new_staging(tmp_path, scratch_prefix("obj-0123"))
    assert mine.name.startswith(f"obj-0123.{os.getpid()}-")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"obj-4567.{dead.pid}-abcd").mkdir()
    (tmp_path / "obj-89ab.k3j2l1").mkdir()  # an older version's unnamed leftover
    assert len(fs.stale_entries(tmp_path, "*")) == 2
    assert [p.name for p in tmp_path.iterdir()] == [mine.name]


def test_descendants_are_found_deepest_first() -> None:
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
def test_sigkill_of_the_build_group_stops_its_compilers_and_the_next_run_cleans_up(tmp_path: Path) -> None:
    from tests.helpers.machine import local_cuda_build_unavailable

    why = local_cuda_build_unavailable()
    if why:
        pytest.skip(why)
    proj = tmp_path / "p"
    copy_build_kernel(proj)
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
    assert not list((proj / BUILD_KERNEL_OUT).glob(".*"))


# --- SIGKILL at every toolkit.core.fs checkpoint: the build's output swap, a provision's install swap ------


def tree(path: Path) -> dict[str, bytes] | None:
    if not path.exists():
        return None
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fs.NO_FSYNC_ENV, "1")  # power-loss safety only; a killed process loses nothing


def _simulated_project(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Metal project built by the real executor against a simulated Xcode (tests/build/test_metal.py)."""
    from tests.build import test_metal as tm

    return tm.simulated_xcode_project(base, monkeypatch)


def _build(root: Path, cache: Path) -> str:
    """One run of the real local executor (plan → steps through the cache → build/<variant>/ swapped in)."""
    from tests.build import test_metal as tm

    return tm.run_local_build(root, cache, jobs=1).out_dir


@pytest.mark.parametrize("mode", ["exchange", "journaled"])
def test_sigkill_during_a_builds_output_swap_leaves_the_old_or_the_new_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """build/<variant>/ exists (OLD); the package's __init__.py changes, so the next build re-assembles it
    from cached objects (NEW). Killed at every checkpoint of that run, build/<variant>/ is OLD or NEW, and
    the next run's start-up cleanup (the executor's own) leaves exactly OLD or NEW and no leftover."""
    if mode == "journaled":
        monkeypatch.setenv(fs.NO_EXCHANGE_ENV, "1")
    template = tmp_path / "template"
    root = _simulated_project(template, monkeypatch)
    out_dir = _build(root, template / "cache")
    old = tree(root / out_dir)
    (root / "torch-ext" / "mini" / "__init__.py").write_text("from ._ops import ops  # new\n")
    ref = tmp_path / "ref"
    shutil.copytree(template, ref, symlinks=True)
    _build(ref / "proj", ref / "cache")
    new = tree(ref / "proj" / out_dir)
    assert new is not None and old is not None and new != old
    killed = 0
    for n in range(1, 40):
        base = tmp_path / f"p{n}"
        shutil.copytree(template, base, symlinks=True)
        proj, cache = base / "proj", base / "cache"
        status = run_killed_at(n, lambda: _build(proj, cache))  # noqa: B023 - run at once, in this iteration
        final = proj / out_dir
        if os.WIFEXITED(status):
            assert os.WEXITSTATUS(status) == 0 and tree(final) == new
            break
        assert os.WTERMSIG(status) == signal.SIGKILL
        killed += 1
        if mode == "exchange" or final.exists():
            assert tree(final) in (old, new), f"checkpoint {n}: build/ holds neither the old nor the new variant"
        clean_stale_stages(final.parent)
        assert tree(final) in (old, new), f"checkpoint {n}: neither old nor new after the next run's cleanup"
        assert sorted(p.name for p in final.parent.iterdir()) == [final.name], f"checkpoint {n}: leftovers"
        shutil.rmtree(base)
    else:
        pytest.fail("the build never completed")
    assert killed >= (3 if mode == "exchange" else 5), "too few checkpoints of the output swap exercised"


def _fake_pip(cmd: list[str]) -> tuple[int, str]:
    root = Path(cmd[cmd.index("--target") + 1]) / "nvidia" / "cu13"
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "bin" / "nvcc").write_text("nvcc\n")
    (root / "include" / "cuda_runtime.h").write_text("// new\n")
    return 0, ""


@pytest.mark.parametrize("start,mode", [("absent", "exchange"), ("leftover", "exchange"), ("leftover", "journaled")])
def test_sigkill_during_a_provisions_install_swap_leaves_the_old_or_the_new_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str, mode: str
) -> None:
    """An install into the user cache killed at every checkpoint: the install dir is the old state (absent,
    or an older tool's half-made leftover) or the complete new install; the next provision completes it and
    leaves nothing beside it."""
    if mode == "journaled":
        monkeypatch.setenv(fs.NO_EXCHANGE_ENV, "1")
    killed = 0
    for n in range(1, 40):
        base = tmp_path / f"p{n}"
        item = pv.toolkit_install("cuda", "cuda-toolkit[nvcc,cccl,cudart]", "13.0.3", "pypi", base)
        if start == "leftover":
            (item.path / "half").mkdir(parents=True)  # no .complete: an older tool's interrupted install
            (item.path / "half" / "x").write_text("old\n")
        old = tree(item.path)
        status = run_killed_at(n, lambda: pv.provision(item, runner=_fake_pip))  # noqa: B023
        if os.WIFEXITED(status):
            assert os.WEXITSTATUS(status) == 0 and item.ready and "half/x" not in (tree(item.path) or {})
            break
        assert os.WTERMSIG(status) == signal.SIGKILL
        killed += 1
        seen = tree(item.path)
        if mode == "exchange" or seen is not None:
            assert seen == old or (item.ready and "half/x" not in (seen or {})), f"checkpoint {n}: a mix of old and new"
        pv.provision(item, runner=_fake_pip)  # the next run
        assert item.ready and sorted(p.name for p in base.iterdir()) == [item.path.name], f"checkpoint {n}"
    else:
        pytest.fail("the install never completed")
    assert killed >= (2 if start == "absent" else 3 if mode == "exchange" else 5), "too few checkpoints"
