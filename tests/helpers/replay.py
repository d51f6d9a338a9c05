"""llama.cpp-shaped upstream histories for `outdated` / `update` (and a project pinned at their start).

`mini_history` replays a story on our miniature ggml (toolkit/data/mini-upstream, written by us): the state
transposed in the kernel and ggml-cpu's reference (a body change under the same declarations), a commit outside
the closure, and a commit that makes a change one of our test patches makes. `real_history` replays real ggml
commits (from a clone named by GGML_VENDOR_REAL_UPSTREAM) as llama.cpp pins: each ggml tree under `ggml/`.
`pinned_project` copies this repository's configuration and templates, points it at the replay and syncs and
renders it at the first pin.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT
from tests.helpers.fixture_repos import git, make_patch
from tests.helpers.gdn_flip import flip_state_indexing
from toolkit.core import ggml_facts
from toolkit.sync.embedded import mini_files

GDN = "src/ggml-cuda/gated_delta_net.cu"
FA = "src/ggml-cuda/fattn-vec.cuh"

# A CPU reference of our own shaped like ggml-cpu's (the function templates/facts.py's BEHAVIOUR names).
MINI_OPS_CPP = """// Miniature CPU reference (written by the ggml-vendor authors).
#include "ggml.h"

static void ggml_compute_forward_gated_delta_net_one_chunk(const float * q, const float * k, const float * v,
        const float * g, const float * beta, float * S, float * out, int D) {
    for (int c = 0; c < D; c++) {
        float kv = 0.0f;
        for (int i = 0; i < D; i++) { S[c * D + i] *= expf(g[0]); kv += S[c * D + i] * k[i]; }
        const float delta = (v[c] - kv) * beta[0];
        float o = 0.0f;
        for (int i = 0; i < D; i++) { S[c * D + i] += k[i] * delta; o += S[c * D + i] * q[i]; }
        out[c] = o / sqrtf((float) D);
    }
}
"""

SCALE_OLD = "        attn[t * H * S_v + col] = out * scale;\n"
SCALE_NEW = "        const float scaled = out * scale;\n        attn[t * H * S_v + col] = scaled;\n"


def _commit_tree(repo: Path, files: dict[str, str], message: str, date: str) -> str:
    for rel, text in files.items():
        dest = repo / (rel if rel == "LICENSE" else "ggml/" + rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    git(repo, "add", "-A")
    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", message, env=env)
    return git(repo, "rev-parse", "HEAD")


def mini_tree() -> dict[str, str]:
    files = {path: data.decode() for path, data in mini_files().items()}
    files[ggml_facts.CPU_OPS_SOURCE] = MINI_OPS_CPP
    return files


def mini_history(repo: Path) -> dict[str, str]:
    """p0 (the miniature) -> p1 (state transposed, kernel and reference) -> p2 (README only) -> p3 (the output
    scaled once, in the GDN kernel); master at p3. Returns label -> commit."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/master")
    files = mini_tree()
    pins = {"p0": _commit_tree(repo, files, "import the miniature", "2026-08-21T10:00:00+00:00")}
    files[GDN] = flip_state_indexing(files[GDN])
    files[ggml_facts.CPU_OPS_SOURCE] = MINI_OPS_CPP.replace("S[c * D + i]", "S[i * D + c]")
    pins["p1"] = _commit_tree(repo, files, "graph : transpose the state (mini/1)", "2026-09-02T10:00:00+00:00")
    (repo / "README.md").write_text("a file outside every closure\n")
    pins["p2"] = _commit_tree(repo, {}, "docs : readme (mini/2)", "2026-09-20T10:00:00+00:00")
    assert SCALE_OLD in files[GDN]
    files[GDN] = files[GDN].replace(SCALE_OLD, SCALE_NEW)
    pins["p3"] = _commit_tree(repo, files, "cuda : scale the output once (mini/3)", "2026-10-05T10:00:00+00:00")
    return pins


def gdn_at(repo: Path, commit: str) -> str:
    return git(repo, "show", f"{commit}:ggml/{GDN}") + "\n"


def patch_of(path: str, old: str, new: str, subject: str) -> str:
    """A patch file as `patch save` writes them: a subject line, then the diff (paths relative to vendor/ggml)."""
    diff = make_patch(path, old, new)
    assert diff, "the edit changes nothing"
    return f"{subject}\n\n{diff}"


def real_history(src: Path, commits: tuple[str, ...], dest: Path) -> tuple[Path, list[str], dict[str, str]]:
    """Real ggml commits of `src` replayed as llama.cpp commits (trees under ggml/), master at the last.
    Returns (repo, pins in order, llama.cpp commit -> ggml commit)."""
    gd = src if (src / "objects").is_dir() and (src / "HEAD").is_file() else src / ".git"
    git(dest.parent, "init", "-q", str(dest))
    (dest / ".git" / "objects" / "info" / "alternates").write_text(str((gd / "objects").resolve()) + "\n")
    env = {"GIT_INDEX_FILE": str(dest / ".git" / "tmp-index")}
    parent, pins, ggml_of = None, [], {}
    for c in commits:
        subject = git(src, f"--git-dir={gd}", "log", "-1", "--format=%s", c)
        date = git(src, f"--git-dir={gd}", "log", "-1", "--format=%cI", c)
        git(dest, "read-tree", "--empty", env=env)
        git(dest, "read-tree", "--prefix=ggml/", f"{c}^{{tree}}", env=env)
        tree = git(dest, "write-tree", env=env)
        args = ["commit-tree", tree, "-m", f"{subject} [ggml {c}]"] + (["-p", parent] if parent else [])
        parent = git(dest, *args, env={**env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        pins.append(parent)
        ggml_of[parent] = c
    assert parent is not None, f"no commits replayed from {src}"
    git(dest, "update-ref", "refs/heads/master", parent)
    git(dest, "symbolic-ref", "HEAD", "refs/heads/master")
    return dest, pins, ggml_of


def has_commits(src: Path, commits: tuple[str, ...]) -> list[str]:
    gd = src if (src / "objects").is_dir() and (src / "HEAD").is_file() else src / ".git"
    return [c for c in commits if subprocess.run(["git", f"--git-dir={gd}", "cat-file", "-e", c]).returncode]


def pinned_project(dest: Path, upstream: Path, pin: str, patches: dict[str, str] | None = None) -> Path:
    """This repository's configuration, templates and matrices (no patches of ours but `patches`), upstream the
    replay, synced at `pin` and rendered, as a git checkout."""
    from toolkit import render, sync
    from toolkit.ci import workflow
    from toolkit.core import config
    from toolkit.demo.workspace import make_workspace

    root = make_workspace(REPO_ROOT, dest, upstream=str(upstream))
    for name, text in (patches or {}).items():
        (root / "vendor" / "patches" / name).write_text(text)
    cfg = config.load(root)
    sync.execute(sync.plan(cfg, sync.Request(rev=pin)))
    cfg = config.load(root)
    for view in cfg.selected(()):
        render.execute(render.plan(view))
    workflow.execute(workflow.plan(cfg))
    (root / ".gitignore").write_text("build/\n.cache/\nvendor/ggml/\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "the project at the old pin")
    return root


def cli(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`ggml-vendor ARGS -C root` in a child process, as a user runs it (`env`: variables added to ours)."""
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args, "-C", str(root)],
        capture_output=True,
        text=True,
        env={**os.environ, "GGML_VENDOR_NO_FSYNC": "1", **(env or {})},
        timeout=600,
    )
