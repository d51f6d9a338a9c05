"""Integration: sync against a real ggml (or llama.cpp) clone named by GGML_VENDOR_REAL_UPSTREAM, in both
layouts (a llama.cpp-shaped repository is built from a ggml clone on the fly, sharing its objects).

At the snapshot docs/upstream.md documents (ggml d99724f2) the closures must be exactly §8's."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.helpers.fixture_repos import git, locked, sync_project
from toolkit.core import config
from toolkit.core.config import Config
from toolkit.core.lock import Lock
from toolkit.sync.project_plan import SyncRequest

pytestmark = pytest.mark.real_upstream
REAL = os.environ.get("GGML_VENDOR_REAL_UPSTREAM")
REPO_ROOT = Path(__file__).resolve().parents[2]
DOC_SNAPSHOT = "d99724f2b141fed9e1a9f402213506c081433465"

# docs/upstream.md §8.1-§8.4 at DOC_SNAPSHOT (standalone layout).
GDN_CUDA_8_1 = {
    "src/ggml-cuda/gated_delta_net.cu",
    "src/ggml-cuda/gated_delta_net.cuh",
    "src/ggml-cuda/common.cuh",
    "src/ggml-cuda/vendors/cuda.h",
    "src/ggml-cuda/vendors/hip.h",
    "src/ggml-cuda/vendors/musa.h",
    "src/ggml-common.h",
    "src/ggml-impl.h",
    "include/ggml.h",
    "include/ggml-cuda.h",
    "include/ggml-backend.h",
    "include/ggml-alloc.h",
    "include/gguf.h",
}
FA_CUDA_8_2 = (GDN_CUDA_8_1 - {"src/ggml-cuda/gated_delta_net.cu", "src/ggml-cuda/gated_delta_net.cuh"}) | {
    "src/ggml-cuda/fattn-vec.cuh",
    "src/ggml-cuda/fattn-common.cuh",
    "src/ggml-cuda/convert.cuh",
    "src/ggml-cuda/vecdotq.cuh",
}
METAL_PRESPLIT_8_3 = {"src/ggml-metal/ggml-metal.metal", "src/ggml-metal/ggml-metal-impl.h", "src/ggml-common.h"}


@pytest.fixture(scope="module")
def real_repo() -> Path:
    if not REAL:
        pytest.skip("GGML_VENDOR_REAL_UPSTREAM is not set (point it at a ggml or llama.cpp clone to run this)")
    path = Path(REAL)
    if not path.exists():
        pytest.skip(f"GGML_VENDOR_REAL_UPSTREAM={REAL} does not exist")
    return path


def _objects_dir(repo: Path) -> Path:
    return repo / "objects" if (repo / "objects").is_dir() else repo / ".git" / "objects"


@pytest.fixture(scope="module")
def llama_shaped(real_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A llama.cpp-layout repository whose one commit holds the real ggml tree under ggml/ (objects shared)."""
    head = git(real_repo, f"--git-dir={_git_dir(real_repo)}", "rev-parse", "HEAD")
    if _has(real_repo, f"{head}:ggml/include/ggml.h"):
        pytest.skip("GGML_VENDOR_REAL_UPSTREAM is already a llama.cpp clone; its own layout is tested directly")
    dest = tmp_path_factory.mktemp("llama-shaped") / "llama.cpp"
    git(dest.parent, "init", "-q", str(dest))  # no checkout ever happens: the tree is built in a temp index
    (dest / ".git" / "objects" / "info" / "alternates").write_text(str(_objects_dir(real_repo).resolve()) + "\n")
    env = {"GIT_INDEX_FILE": str(dest / ".git" / "tmp-index")}
    git(dest, "read-tree", "--prefix=ggml/", f"{head}^{{tree}}", env=env)
    tree = git(dest, "write-tree", env=env)
    commit = git(dest, "commit-tree", tree, "-m", "llama.cpp-shaped copy of ggml", env=env)
    git(dest, "update-ref", "refs/heads/master", commit)
    return dest


def _git_dir(repo: Path) -> Path:
    return repo if (repo / "objects").is_dir() and (repo / "HEAD").is_file() else repo / ".git"


def _has(repo: Path, obj: str) -> bool:
    import subprocess

    return (
        subprocess.run(["git", f"--git-dir={_git_dir(repo)}", "cat-file", "-e", obj], capture_output=True).returncode
        == 0
    )


def _project(tmp: Path, upstream: Path) -> config.Config:
    tmp.mkdir(parents=True)
    # this repository's own [tool.ggml-vendor] (its ops and entries), pointed at the clone
    text = (REPO_ROOT / "pyproject.toml").read_text()
    (tmp / "pyproject.toml").write_text(text)
    shutil.copytree(REPO_ROOT / "templates", tmp / "templates")  # each package's facts.py (its ops' upstream facts)
    (tmp / "vendor" / "patches").mkdir(parents=True)
    config.set_value(tmp, "upstream", str(upstream))
    return config.load(tmp)


def _sync_twice(cfg: Config) -> tuple[float, float, Lock]:
    t = time.perf_counter()
    first = sync_project(cfg, SyncRequest(rev="HEAD"))
    t1 = time.perf_counter() - t
    t = time.perf_counter()
    again = sync_project(cfg, SyncRequest(rev="HEAD"))
    t2 = time.perf_counter() - t
    assert first.status == "synced" and again.status == "unchanged" and again.written == ()
    return t1, t2, locked(cfg.vendor_dir)


def test_real_upstream_both_layouts(real_repo: Path, llama_shaped: Path, tmp_path: Path) -> None:
    results = {}
    for layout, repo in (("ggml", real_repo), ("llama.cpp", llama_shaped)):
        cfg = _project(tmp_path / layout, repo)
        first, noop, lock = _sync_twice(cfg)
        assert lock.layout == layout
        closures = {(op, b): set(files) for op, per in lock.closures.items() for b, files in per.items()}
        results[layout] = (closures, lock, first, noop, cfg)
        print(f"\n[{layout}] {lock.commit} first sync {first:.3f}s, no-op {noop:.3f}s, {len(lock.files)} files")
        for (op, b), files in sorted(closures.items()):
            print(f"  {op}/{b}: {len(files)} files: {', '.join(sorted(files))}")
    ggml_cl, ggml_lock, *_ = results["ggml"]
    llama_cl, llama_lock, *_ = results["llama.cpp"]
    assert ggml_cl == llama_cl and ggml_lock.files == llama_lock.files  # same bytes whatever the layout
    # the core of every closure, at any pin
    assert {"src/ggml-cuda/gated_delta_net.cu", "src/ggml-cuda/common.cuh", "include/ggml.h"} <= ggml_cl[
        ("ggml-attn-kernels:gated_delta_net", "cuda")
    ]
    assert {"src/ggml-cuda/fattn-vec.cuh", "src/ggml-cuda/fattn-common.cuh"} <= ggml_cl[
        ("ggml-attn-kernels:flash_attn", "cuda")
    ]
    assert "LICENSE" in ggml_lock.files
    assert ggml_lock.licenses and "MIT" in {s for i in ggml_lock.licenses for s in i.spdx}
    if ggml_lock.commit == DOC_SNAPSHOT:
        assert ggml_cl[("ggml-attn-kernels:gated_delta_net", "cuda")] == GDN_CUDA_8_1  # 13 files
        assert ggml_cl[("ggml-attn-kernels:flash_attn", "cuda")] == FA_CUDA_8_2  # 15
        assert ggml_cl[("ggml-attn-kernels:gated_delta_net", "metal")] == METAL_PRESPLIT_8_3  # 3
        assert ggml_cl[("ggml-attn-kernels:flash_attn", "metal")] == METAL_PRESPLIT_8_3
        # the first package's closure is the documented one; the lock holds the union of every package's
        first_files = set().union(
            *(
                set(ggml_cl[k])
                for k in ggml_cl
                if k[0] in ("ggml-attn-kernels:gated_delta_net", "ggml-attn-kernels:flash_attn")
            )
        )
        assert first_files == GDN_CUDA_8_1 | FA_CUDA_8_2 | METAL_PRESPLIT_8_3
        union = set().union(*ggml_cl.values())
        assert set(ggml_lock.files) == union | {"LICENSE", "AUTHORS"}
        assert ggml_lock.llama_cpp_commit == "d3cf1f14a2e16fbd7ebad34b12cb71b8af345c43"
        assert all(v != "absent" for v in ggml_lock.fingerprints.values()), ggml_lock.fingerprints
        lic = {i.path: i for i in ggml_lock.licenses}
        # the inventory holds the notice exactly as upstream's LICENSE states it (read back from vendor/)
        license_text = (results["ggml"][4].vendor_dir / "ggml" / "LICENSE").read_text()
        assert lic["LICENSE"].copyright == tuple(
            line.strip() for line in license_text.splitlines() if line.strip().startswith("Copyright")
        )
        assert lic["src/ggml-metal/ggml-metal.metal"].copyright == (
            "MIT licensed. Copyright (c) 2023 Jeffrey Quesnelle and Bowen Peng.",
        )
    # the vendored bytes are the upstream blobs (no patches here): git's blob id of each file matches
    cfg = results["ggml"][4]
    for f in ggml_lock.file_info:
        data = (cfg.vendor_dir / "ggml" / f.path).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == f.blob, f.path


def test_real_upstream_pin_move_drift(real_repo: Path, tmp_path: Path) -> None:
    """Moving the pin back 40 commits and forward again lists the subset's commits with subjects."""
    cfg = _project(tmp_path / "p", real_repo)
    sync_project(cfg, SyncRequest(rev="HEAD"))
    old = git(real_repo, f"--git-dir={_git_dir(real_repo)}", "rev-parse", "HEAD~40")
    sync_project(cfg, SyncRequest(rev=old, force=True))
    rep = sync_project(cfg, SyncRequest(rev="HEAD"))
    assert rep.drift is not None and rep.drift.commits is not None
    print(
        f"\n{len(rep.drift.commits)} commits touched the subset in HEAD~40..HEAD; "
        f"{len(rep.drift.changed)} files changed; regions moved: {[r.name for r in rep.drift.regions]}"
    )
    assert Path(rep.drift_paths[0]).is_file()
    shutil.rmtree(cfg.vendor_dir)
