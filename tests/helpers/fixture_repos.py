"""Builders of fixture upstream git repositories (miniature ggml trees written here) and test projects.

`build_upstream(path, layout)` makes a repository with several commits, tags and branches that exercise
sync: includes across folders, a rename between pins, a signature change (fingerprint drift), and side
branches with a missing include, a symlink escaping the tree, an in-tree symlink, a missing entry file
and a post-split Metal layout. Nothing here is ggml code.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit.build.inputs import ProjectInputs
    from toolkit.core.config import Config
    from toolkit.core.lock import Lock
    from toolkit.sync.project_plan import SyncRequest
    from toolkit.sync.report import SyncReport

MIT = """MIT License

Copyright (c) 2024 The fixture authors

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software, to deal in the Software without restriction.
"""

GDN_CU_V1 = """#include "gated_delta_net.cuh"
#include "ggml-cuda/common.cuh"

template <int S_v, bool KDA, bool keep_rs_t>
__global__ void gated_delta_net_cuda(const float * q, const float * k, float * dst,
                                     int64_t H) {
    dst[0] = q[0] * k[0];
}

static void launch_gated_delta_net(const float * q_d, const float * k_d, float * dst_d,
        int64_t S_v, int64_t H, cudaStream_t stream) {
    switch (S_v) {
        case 64: break;
        default:
            GGML_ABORT("fatal error");
    }
}
"""

SSM_CONV_CU_V1 = """#include "common.cuh"
#include "ssm-conv.cuh"
#include "unary.cuh"

template <bool apply_silu>
static void ssm_conv_f32_cuda(const float * src0, const float * src1, const float * bias, const int src0_nb0, const int src0_nb1,
                              const int src0_nb2, const int src1_nb1, float * dst, const int dst_nb0, const int dst_nb1,
                              const int dst_nb2, const int64_t nc, const int64_t nr, const int64_t n_t,
                              const int64_t n_s, cudaStream_t stream) {
    switch (nc) {
        case 4: break;
        default: GGML_ABORT("Only support kernel sizes 3, 4, 5, 9, 15 right now.");
    }
}
"""

BASE_FILES: dict[str, str] = {
    "include/ggml.h": "// SPDX-License-Identifier: MIT\n#pragma once\n#include <stdint.h>\nint ggml_answer(void);\n",
    "include/ggml-backend.h": '#pragma once\n#include "ggml.h"\n',
    "src/ggml-impl.h": '#pragma once\n#include "ggml.h"\n#include <string.h>\n',
    "src/ggml-common.h": "#pragma once\n#define QK8_0 32\n",
    "src/ggml-cuda/common.cuh": (
        '#pragma once\n#include "ggml.h"\n#include "ggml-impl.h"\n#include "ggml-backend.h"\n'
        '#include "ggml-common.h"\n#include <cuda_runtime.h>\n'
        '// #include "commented-out.h"\n/* #include "block-commented.h"\n   #include "still-commented.h" */\n'
        '#if defined(GGML_USE_HIP)\n#  include "vendors/hip.h"\n#else\n#include "vendors/cuda.h"\n#endif\n'
        "struct ggml_cuda_device_info {\n    int cc;\n};\n"
    ),
    "src/ggml-cuda/vendors/cuda.h": "#pragma once\n#include <cuda_fp16.h>\n",
    "src/ggml-cuda/vendors/hip.h": "#pragma once\n#include <hip/hip_runtime.h>\n",
    "src/ggml-cuda/gated_delta_net.cuh": '#include "common.cuh"\n#include "ggml.h"\n',
    "src/ggml-cuda/gated_delta_net.cu": GDN_CU_V1,
    "src/ggml-cuda/ssm-conv.cuh": '#include "common.cuh"\n',
    "src/ggml-cuda/ssm-conv.cu": SSM_CONV_CU_V1,
    "src/ggml-cuda/unary.cuh": '#pragma once\n#include "common.cuh"\n',
    "src/ggml-cuda/fattn-vec.cuh": '#include "common.cuh"\n#include "fattn-common.cuh"\n',
    "src/ggml-cuda/fattn-common.cuh": (
        '#pragma once\n#include "common.cuh"\n#include "convert.cuh"\n#define FATTN_KQ_STRIDE       256\n'
    ),
    "src/ggml-cuda/convert.cuh": '#pragma once\n#include "common.cuh"\nint convert_me(int);\n',
    "src/ggml-cuda/fattn.cu": '#include "fattn-vec.cuh"\n#include "fattn-mma.cuh"\n',  # not an entry: never vendored
    "src/ggml-cuda/fattn-mma.cuh": "#pragma once\n",
    "src/ggml-metal/ggml-metal.metal": (
        '#define GGML_COMMON_DECL_METAL\n#include "ggml-common.h"\n#include "ggml-metal-impl.h"\n'
        "#include <metal_stdlib>\n// MIT licensed. Copyright (c) 2023 Someone Else.\n"
    ),
    "src/ggml-metal/ggml-metal-impl.h": "#pragma once\n#define FC_FLASH_ATTN_EXT_PAD 100\n#define FC_GATED_DELTA_NET 1600\n",
    "src/ggml-cpu/ops.cpp": '#include "ggml.h"\nint cpu(void) { return 1; }\n',
}

# Files of each closure with the standard entries (standalone layout).
GDN_CUDA = {
    "src/ggml-cuda/gated_delta_net.cu",
    "src/ggml-cuda/gated_delta_net.cuh",
    "src/ggml-cuda/common.cuh",
    "include/ggml.h",
    "src/ggml-impl.h",
    "include/ggml-backend.h",
    "src/ggml-common.h",
    "src/ggml-cuda/vendors/hip.h",
    "src/ggml-cuda/vendors/cuda.h",
}
FA_CUDA = (GDN_CUDA - {"src/ggml-cuda/gated_delta_net.cu", "src/ggml-cuda/gated_delta_net.cuh"}) | {
    "src/ggml-cuda/fattn-vec.cuh",
    "src/ggml-cuda/fattn-common.cuh",
    "src/ggml-cuda/convert.cuh",
}
SSM_CUDA = (GDN_CUDA - {"src/ggml-cuda/gated_delta_net.cu", "src/ggml-cuda/gated_delta_net.cuh"}) | {
    "src/ggml-cuda/ssm-conv.cu",
    "src/ggml-cuda/ssm-conv.cuh",
    "src/ggml-cuda/unary.cuh",
}
METAL = {"src/ggml-metal/ggml-metal.metal", "src/ggml-metal/ggml-metal-impl.h", "src/ggml-common.h"}
ALL_V1 = GDN_CUDA | FA_CUDA | SSM_CUDA | METAL | {"LICENSE"}

# The three ops, as the project's own pyproject.toml configures them (both layouts' Metal entries), for the
# package {name}.
OPS_TABLES = """\
[tool.ggml-vendor.packages.{name}.ops.gated_delta_net]
cuda = ["src/ggml-cuda/gated_delta_net.cu"]
metal = [["src/ggml-metal/kernels/gated_delta_net.metal", "src/ggml-metal/ggml-metal.metal"]]

[tool.ggml-vendor.packages.{name}.ops.flash_attn]
cuda = ["src/ggml-cuda/fattn-vec.cuh"]
metal = [["src/ggml-metal/kernels/fa.metal", "src/ggml-metal/ggml-metal.metal"]]

[tool.ggml-vendor.packages.{name}.ops.ssm_conv]
cuda = ["src/ggml-cuda/ssm-conv.cu"]
metal = [["src/ggml-metal/kernels/ssm_conv.metal", "src/ggml-metal/ggml-metal.metal"]]
"""

PROJECT_TOML = """[project]
name = "fixture-kernels"
version = "0.0.0"

[tool.ggml-vendor]
license = "MIT"
upstream = "{upstream}"
backends = ["cuda", "metal"]

[tool.ggml-vendor.packages.fixture-kernels]
version = 1   # a comment that must survive
hub-repo = "someone/fixture-kernels"

""" + OPS_TABLES.replace("{name}", "fixture-kernels")

# The render tests' project: {backends} and {archs} are comma-separated quoted lists.
RENDER_PYPROJECT = """\
[tool.ggml-vendor]
license = "MIT"
upstream = "https://github.com/ggml-org/llama.cpp"
backends = [{backends}]
cuda-archs = [{archs}]

[tool.ggml-vendor.packages.ggml-attn-kernels]
version = 1
hub-repo = "example/ggml-attn-kernels"

""" + OPS_TABLES.replace("{name}", "ggml-attn-kernels")


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    full = {**os.environ, **(env or {})}
    full.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    proc = subprocess.run(["git", *args], cwd=cwd, env=full, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


@dataclass
class FixtureRepo:
    """A fixture upstream: `commits` maps labels (v1, v2, ...) to full shas."""

    path: Path
    layout: str  # "ggml" or "llama.cpp"
    commits: dict[str, str] = field(default_factory=dict)
    _tick: int = 0

    @property
    def prefix(self) -> str:
        return "ggml/" if self.layout == "llama.cpp" else ""

    def _repo_path(self, path: str) -> Path:
        # In the llama.cpp layout the license lives at the repository root, as in llama.cpp itself.
        if self.prefix and path == "LICENSE":
            return self.path / path
        return self.path / (self.prefix + path)

    def write(self, files: dict[str, str]) -> None:
        for rel, text in files.items():
            target = self._repo_path(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink():
                target.unlink()
            target.write_text(text)

    def remove(self, *paths: str) -> None:
        for rel in paths:
            self._repo_path(rel).unlink()

    def symlink(self, rel: str, target: str) -> None:
        link = self._repo_path(rel)
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            link.unlink()
        os.symlink(target, link)

    def commit(self, label: str, message: str) -> str:
        self._tick += 1
        date = f"2026-01-{self._tick:02d}T12:00:00+00:00"
        git(self.path, "add", "-A")
        git(
            self.path,
            "commit",
            "-q",
            "--no-gpg-sign",
            "-m",
            message,
            env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
        )
        sha = git(self.path, "rev-parse", "HEAD")
        self.commits[label] = sha
        return sha

    def checkout(self, ref: str, new_branch: str | None = None) -> None:
        if new_branch:
            git(self.path, "checkout", "-q", "-b", new_branch, ref)
        else:
            git(self.path, "checkout", "-q", ref)


def build_upstream(path: Path, layout: str = "ggml") -> FixtureRepo:
    """Main line: v1 (tag v1) -> v1b (kernel body tweak + unrelated cpu change) -> v2 (convert.cuh renamed to
    cvt.cuh, launcher signature changed; tag v2, branch master). Side branches from v1, each one commit:
    missing-include, symlink-escape, symlink-inside, no-license, no-metal, metal-split, submodule (gitlinks at
    the root and beside the kernels) and submodule-include (a kernel header including a file inside one)."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    git(path, "symbolic-ref", "HEAD", "refs/heads/master")
    repo = FixtureRepo(path, layout)
    repo.write({"LICENSE": MIT, **BASE_FILES, "README.md": "fixture upstream\n"})
    repo.commit("v1", "initial import (fixture/1)")
    git(path, "tag", "v1")

    repo.write(
        {
            "src/ggml-cuda/gated_delta_net.cu": GDN_CU_V1.replace("q[0] * k[0]", "q[0] * k[0] + 1.0f"),
            "src/ggml-cpu/ops.cpp": '#include "ggml.h"\nint cpu(void) { return 2; }\n',
        }
    )
    repo.commit("v1b", "cuda : tweak the gdn kernel body (llama/101)")
    git(path, "tag", "v1b")

    repo.remove("src/ggml-cuda/convert.cuh")
    repo.write(
        {
            "src/ggml-cuda/cvt.cuh": BASE_FILES["src/ggml-cuda/convert.cuh"],
            "src/ggml-cuda/fattn-common.cuh": BASE_FILES["src/ggml-cuda/fattn-common.cuh"].replace(
                "convert.cuh", "cvt.cuh"
            ),
            "src/ggml-cuda/gated_delta_net.cu": GDN_CU_V1.replace("q[0] * k[0]", "q[0] * k[0] + 1.0f").replace(
                "int64_t S_v, int64_t H, cudaStream_t stream", "int64_t S_v, int64_t H, int K, cudaStream_t stream"
            ),
        }
    )
    repo.commit("v2", "cuda : rename convert.cuh, add K to the launcher (llama/102)")
    git(path, "tag", "v2")
    git(path, "branch", "release", "v2")

    def side(branch: str, label: str, message: str, change: Callable[[], object]) -> None:
        repo.checkout(repo.commits["v1"], new_branch=branch)
        change()
        repo.commit(label, message)
        repo.checkout("master")

    side(
        "missing-include",
        "missing-include",
        "fattn: include a header that is not there",
        lambda: repo.write(
            {
                "src/ggml-cuda/fattn-common.cuh": BASE_FILES["src/ggml-cuda/fattn-common.cuh"]
                + '#include "nowhere.cuh"\n'
            }
        ),
    )
    side(
        "symlink-escape",
        "symlink-escape",
        "vendors: cuda.h becomes a link out of the tree",
        lambda: repo.symlink("src/ggml-cuda/vendors/cuda.h", "../../../../../outside-secret.h"),
    )

    def link_inside() -> None:
        repo.write({"src/ggml-cuda/vendors/cuda-real.h": "#pragma once\n// the real one\n"})
        repo.symlink("src/ggml-cuda/vendors/cuda.h", "cuda-real.h")

    side(
        "symlink-inside",
        "symlink-inside",
        "vendors: cuda.h becomes a link inside the tree",
        link_inside,
    )
    side("no-license", "no-license", "drop the license file", lambda: repo.remove("LICENSE"))
    side("no-metal", "no-metal", "metal: remove the monolith", lambda: repo.remove("src/ggml-metal/ggml-metal.metal"))
    side(
        "metal-split",
        "metal-split",
        "metal: split kernels into per-op files",
        lambda: repo.write(
            {
                "src/ggml-metal/kernels/gated_delta_net.metal": '#include "common.h"\n#include "../ggml-metal-impl.h"\n',
                "src/ggml-metal/kernels/common.h": '#pragma once\n#include "ggml-common.h"\n',
            }
        ),
    )
    for branch, include in (("submodule", False), ("submodule-include", True)):
        # A gitlink at the root and one beside the kernels (llama.cpp has carried submodules); the second
        # branch also includes a header from inside one. `git add -A` would drop a gitlink without its
        # checkout, so the index is written directly.
        repo.checkout(repo.commits["v1"], new_branch=branch)
        if include:
            repo.write({"src/ggml-cuda/gated_delta_net.cuh": '#include "common.cuh"\n#include "sub/extra.cuh"\n'})
            git(path, "add", "-A")
        for link in ("third_party/vendored", f"{repo.prefix}src/ggml-cuda/sub"):
            git(path, "update-index", "--add", "--cacheinfo", f"160000,{repo.commits['v1']},{link}")
        git(path, "commit", "-q", "--no-gpg-sign", "-m", f"add submodules ({branch})")
        repo.commits[branch] = git(path, "rev-parse", "HEAD")
        repo.checkout("master")
    return repo


def sync_project(cfg: Config, req: SyncRequest | None = None, **kw: Any) -> SyncReport:
    """Sync `cfg` as `ggml-vendor sync` does: under the project lock (shared for a dry run), the sync stage's
    plan, then its execute (a dry run: the plan's report). `req` is a SyncRequest, or its fields as `kw`."""
    from toolkit import sync
    from toolkit.core.projectlock import project_lock
    from toolkit.sync.project_plan import SyncRequest

    req = req if req is not None else SyncRequest(**kw)
    with project_lock(cfg.root, command="sync", shared=req.dry_run, wait=req.wait):
        plan = sync.plan(cfg, req)
        return plan.dry_run_report() if req.dry_run else sync.execute(plan)


# The first package's op facts (kernel names, fingerprinted regions, behaviour functions): a fixture project
# declares the same ops, so it carries the same facts file beside its (absent) templates.
FACTS_FILE = Path(__file__).resolve().parents[2] / "templates" / "ggml-attn-kernels" / "facts.py"


def locked(vendor_dir: Path) -> Lock:
    """The lock under `vendor_dir`, which the test expects to be there (read_lock's None fails the test)."""
    from toolkit.core.lock import read_lock

    lock = read_lock(vendor_dir)
    assert lock is not None, f"no lock under {vendor_dir}"
    return lock


def make_project(path: Path, upstream: str) -> Path:
    """A kernel-package project (pyproject.toml + templates/fixture-kernels/facts.py + vendor/patches/) using
    `upstream`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "pyproject.toml").write_text(PROJECT_TOML.format(upstream=upstream))
    (path / "templates" / "fixture-kernels").mkdir(parents=True, exist_ok=True)
    (path / "templates" / "fixture-kernels" / "facts.py").write_bytes(FACTS_FILE.read_bytes())
    (path / "vendor" / "patches").mkdir(parents=True, exist_ok=True)
    return path


def tree_state(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `path` (symlinks as their target text, special files by their mode) -> (bytes,
    mtime_ns): equal states mean nothing was written."""
    state: dict[str, tuple[bytes, int]] = {}
    if not path.exists():
        return state
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = Path(dirpath) / name
            rel = full.relative_to(path).as_posix()
            st = full.lstat()
            if full.is_symlink():
                data = os.readlink(full).encode()
            elif full.is_file():
                data = full.read_bytes()
            else:  # a FIFO or other special file: never opened (it could block)
                data = f"<special file, mode {st.st_mode:o}>".encode()
            state[rel] = (data, st.st_mtime_ns)
    return state


def make_patch(old_path: str, old: str, new: str, *, prefix: str = "") -> str:
    """A unified diff (git style, a/ b/ prefixes) turning `old` into `new` in `old_path`."""
    import difflib

    return "".join(
        difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), f"a/{prefix}{old_path}", f"b/{prefix}{old_path}"
        )
    )


def tiny_project_inputs(torch_src: str = "b.cpp", kernel_src: str = "a.cu") -> ProjectInputs:
    """A one-binding, one-CUDA-kernel ProjectInputs for build-plan tests that construct the host by hand."""
    from toolkit.build.inputs import KernelSection, ProjectInputs

    return ProjectInputs(
        root=Path("/p"),
        name="k",
        module="k",
        version=1,
        license="MIT",
        upstream=None,
        backends=("cuda",),
        torch_src=(torch_src,),
        torch_include=(),
        torch_cxx_flags=(),
        kernels=(KernelSection("c", "cuda", (), (kernel_src,), cuda_capabilities=("8.0",)),),
        python_files=("__init__.py",),
        source_id="0" * 64,
    )
