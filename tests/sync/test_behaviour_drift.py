"""Drift that sees behaviour (issue 11): per op, the kernel bodies and ggml-cpu's reference are fingerprinted
(declaration and body apart, comments and whitespace out), and a body that moves under an unchanged
declaration is reported as "body changed: review semantics", separately from "signature changed".

Two replays of the same story: our miniature upstream (always), and real ggml history as llama.cpp-shaped
pins when GGML_VENDOR_REAL_UPSTREAM points at a ggml clone."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.fixture_repos import git, locked, make_project, sync_project
from tests.helpers.gdn_flip import flip_state_indexing
from tests.helpers.project import first_package_pyproject
from toolkit.core import config, ggml_facts
from toolkit.sync import behaviour
from toolkit.sync.drift import BODY_CHANGED, SIGNATURE_CHANGED
from toolkit.sync.drift_report import BehaviourDrift, Drift
from toolkit.sync.embedded import mini_files
from toolkit.sync.project_plan import SyncRequest

REPO = Path(__file__).resolve().parents[2]
# Behaviour keys name the op by its lock key, "<package>:<op>" (the replay's project is ggml-attn-kernels).
GDN = "ggml-attn-kernels:gated_delta_net"
GDN_KERNEL = f"{GDN}: cuda kernel gated_delta_net_cuda"
GDN_CPU = f"{GDN}: cpu reference ggml_compute_forward_gated_delta_net_one_chunk"
FA_KERNEL = "flash_attn: cuda kernel flash_attn_ext_vec"


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_VENDOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GGML_VENDOR_NO_FSYNC", "1")
    monkeypatch.delenv("GGML_VENDOR_MIRROR", raising=False)


# --- the normaliser and the function finder -------------------------------------------------------------


def test_comments_and_whitespace_do_not_count_but_code_does() -> None:
    a = "template <int N>\n__global__ void k(float * x,\n    int n) {\n    x[0] = n; // one\n}\n"
    b = "template <int N>\n__global__ void k(float *x, int n)\n{\n  /* the same */ x[0]=n;\n}\n"
    c = "template <int N>\n__global__ void k(float * x, int n) {\n    x[1] = n;\n}\n"
    d = "template <int N>\n__global__ void k(float * x, long n) {\n    x[0] = n;\n}\n"
    pa, pb, pc, pd = (behaviour.print_of(t, "k") for t in (a, b, c, d))
    assert pa is not None and pc is not None and pd is not None
    assert pa == pb  # formatting and comments
    assert pa[0] == pc[0] and pa[1] != pc[1]  # body only
    assert pa[0] != pd[0]  # declaration


def test_calls_and_declarations_are_not_definitions() -> None:
    text = (
        "void f(int);\n"
        "static void g() { f(1); obj.f(2); ns::f(3); }\n"
        'const char * s = "void f(int x) { }";\n'
        "// void f(int x) { commented }\n"
        "void f(int x) {\n    return;\n}\n"
    )
    defs = behaviour.find_definitions(text, "f")
    assert len(defs) == 1 and defs[0].line == 5 and "return" in defs[0].body


# --- the miniature replay (always runs) -----------------------------------------------------------------

# A CPU reference of our own, shaped like ggml-cpu's (the function templates/facts.py BEHAVIOUR names), for the
# miniature: the state row of value column c is contiguous ([value][key]).
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


def _mini_tree() -> dict[str, str]:
    files = {path: data.decode() for path, data in mini_files().items()}
    files[ggml_facts.CPU_OPS_SOURCE] = MINI_OPS_CPP
    return files


def _commit_tree(repo: Path, files: dict[str, str], message: str, prefix: str = "ggml/") -> str:
    for rel, text in files.items():
        dest = repo / (rel if rel == "LICENSE" else prefix + rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def mini_history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A llama.cpp-shaped miniature: p0 -> p1 (state transposed in kernel and reference, same declarations;
    a comment-only edit in the FA kernel) -> p2 (kernel reformatted only) -> p3 (a kernel parameter added)."""
    repo = tmp_path_factory.mktemp("mini-history") / "llama.cpp"
    repo.mkdir()
    git(repo, "init", "-q")
    files = _mini_tree()
    pins = {"p0": _commit_tree(repo, files, "import the miniature")}
    gdn = "src/ggml-cuda/gated_delta_net.cu"
    fa = "src/ggml-cuda/fattn-vec.cuh"
    files[gdn] = flip_state_indexing(files[gdn])
    files[ggml_facts.CPU_OPS_SOURCE] = MINI_OPS_CPP.replace("S[c * D + i]", "S[i * D + c]")
    files[fa] = files[fa].replace("\n", "\n// a comment that changes nothing\n", 1)
    pins["p1"] = _commit_tree(repo, files, "graph : transpose the state (mini/1)")
    files[gdn] = files[gdn].replace("    ", "  ")  # reindent only
    pins["p2"] = _commit_tree(repo, files, "cuda : reformat (mini/2)")
    files[gdn] = re.sub(r"(int\s+K)\) \{", r"\1, int extra) {", files[gdn], count=1)
    assert "int extra" in files[gdn]
    pins["p3"] = _commit_tree(repo, files, "cuda : new kernel parameter (mini/3)")
    return repo, pins


def _replay(tmp_path: Path, upstream: Path, pins: list[str]) -> list[Drift]:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text(first_package_pyproject((REPO / "pyproject.toml").read_text()))
    (root / "templates" / "ggml-attn-kernels").mkdir(parents=True)
    (root / "templates" / "ggml-attn-kernels" / "facts.py").write_bytes(
        (REPO / "templates" / "ggml-attn-kernels" / "facts.py").read_bytes()
    )  # the ops' facts
    (root / "vendor" / "patches").mkdir(parents=True)
    config.set_value(root, "upstream", str(upstream))
    cfg = config.load(root)
    sync_project(cfg, SyncRequest(rev=pins[0]))
    drifts: list[Drift] = []
    for rev in pins[1:]:
        rep = sync_project(cfg, SyncRequest(rev=rev, force=True))
        assert rep.drift is not None
        drifts.append(rep.drift)
    return drifts


def _by_key(drift: Drift) -> dict[str, BehaviourDrift]:
    return {b.key: b for b in drift.behaviour}


def test_mini_replay_flags_body_only_changes_for_review(
    tmp_path: Path, mini_history: tuple[Path, dict[str, str]]
) -> None:
    repo, pins = mini_history
    transpose, reformat, new_param = _replay(tmp_path, repo, [pins["p0"], pins["p1"], pins["p2"], pins["p3"]])

    got = _by_key(transpose)
    assert got[GDN_KERNEL].change == BODY_CHANGED and not got[GDN_KERNEL].breaking
    assert got[GDN_CPU].change == BODY_CHANGED
    assert FA_KERNEL not in got  # a comment is not a behaviour change
    assert transpose.semantics_to_review == (GDN,) and transpose.breaking == ()
    assert not transpose.regions  # the signature fingerprints alone saw nothing: the blind spot
    assert [s for _, s in got[GDN_KERNEL].commits or ()] == ["graph : transpose the state (mini/1)"]
    assert "+    const float * s_in  = curr_state + state_offset + col;" in got[GDN_KERNEL].diff
    assert any("body changed: review semantics" in line for line in transpose.summary_lines())
    assert "body changed: review semantics" in transpose.to_markdown()

    assert reformat.behaviour == ()  # whitespace only

    got = _by_key(new_param)
    assert got[GDN_KERNEL].change == SIGNATURE_CHANGED and got[GDN_KERNEL].breaking
    assert new_param.breaking == (GDN,)
    assert any("signature changed (breaking)" in line for line in new_param.summary_lines())


def test_lock_records_behaviour_without_vendoring_the_reference(
    tmp_path: Path, mini_history: tuple[Path, dict[str, str]]
) -> None:
    repo, pins = mini_history
    cfg = config.load(make_project(tmp_path / "p", str(repo)))
    sync_project(cfg, SyncRequest(rev=pins["p0"]))
    lock = locked(cfg.vendor_dir)
    cpu = GDN_CPU.replace("ggml-attn-kernels:", "fixture-kernels:")  # make_project's package
    assert lock.behaviour[cpu].path == ggml_facts.CPU_OPS_SOURCE
    assert len(lock.behaviour[cpu].body) == 64
    assert ggml_facts.CPU_OPS_SOURCE not in lock.files
    assert not (cfg.vendor_dir / "ggml" / ggml_facts.CPU_OPS_SOURCE).exists()


# --- the real replay (GGML_VENDOR_REAL_UPSTREAM) --------------------------------------------------------

REPLAY = ("36ae4059", "6dafac00", "b41cee5e", "43365523", "7b28f950", "390c2f40", "ed6ad30f", "d99724f2")


def _git_dir(repo: Path) -> Path:
    return repo if (repo / "objects").is_dir() and (repo / "HEAD").is_file() else repo / ".git"


@pytest.fixture(scope="module")
def real_llama_history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], dict[str, str]]:
    real = os.environ.get("GGML_VENDOR_REAL_UPSTREAM")
    if not real:
        pytest.skip("GGML_VENDOR_REAL_UPSTREAM is not set (point it at a ggml clone to replay real history)")
    src = Path(real)
    gd = _git_dir(src)
    missing = [c for c in REPLAY if subprocess.run(["git", f"--git-dir={gd}", "cat-file", "-e", c]).returncode]
    if missing:
        pytest.skip(f"GGML_VENDOR_REAL_UPSTREAM lacks the replay commits {missing}")
    dest = tmp_path_factory.mktemp("llama-history") / "llama.cpp"
    git(dest.parent, "init", "-q", str(dest))
    (dest / ".git" / "objects" / "info" / "alternates").write_text(str((gd / "objects").resolve()) + "\n")
    env = {"GIT_INDEX_FILE": str(dest / ".git" / "tmp-index")}
    parent, pins, subjects = None, [], {}
    for c in REPLAY:
        subject = git(src, f"--git-dir={gd}", "log", "-1", "--format=%s", c)
        git(dest, "read-tree", "--empty", env=env)
        git(dest, "read-tree", "--prefix=ggml/", f"{c}^{{tree}}", env=env)
        tree = git(dest, "write-tree", env=env)
        args = ["commit-tree", tree, "-m", f"{subject} [ggml {c}]"] + (["-p", parent] if parent else [])
        parent = git(dest, *args, env=env)
        pins.append(parent)
        subjects[parent] = c
    assert parent is not None, f"no commits replayed from {src}"
    git(dest, "update-ref", "refs/heads/master", parent)
    return dest, pins, subjects


@pytest.mark.real_upstream
def test_real_replay_flags_the_silent_semantic_changes(
    tmp_path: Path, real_llama_history: tuple[Path, list[str], dict[str, str]]
) -> None:
    repo, pins, ggml_of = real_llama_history
    drifts = _replay(tmp_path, repo, pins)
    steps = {f"{ggml_of[d.old_commit][:8]}->{ggml_of[d.new_commit][:8]}": d for d in drifts}
    for name, d in steps.items():
        print(f"\n{name}: breaking {list(d.breaking)}, review {list(d.semantics_to_review)}")
        for b in d.behaviour:
            print(f"  {b.headline()}  [{len(b.commits or ())} commit(s)]")

    # the state transpose (2026-03-13): no declaration moved, bodies did, in the kernel and in ggml-cpu
    st = _by_key(steps["6dafac00->b41cee5e"])
    assert st[GDN_KERNEL].change == BODY_CHANGED and st[GDN_CPU].change == BODY_CHANGED
    assert GDN in steps["6dafac00->b41cee5e"].semantics_to_review
    assert GDN not in steps["6dafac00->b41cee5e"].breaking
    assert "curr_state[col * S_v + i]" in st[GDN_KERNEL].diff
    commits = st[GDN_KERNEL].commits
    assert commits and "b41cee5e" in commits[0][1]

    # the snapshot order (2026-06-10): same CUDA declaration, kernel and reference bodies changed
    so = _by_key(steps["7b28f950->390c2f40"])
    assert so[GDN_KERNEL].change == BODY_CHANGED and so[GDN_CPU].change == BODY_CHANGED
    assert GDN in steps["7b28f950->390c2f40"].semantics_to_review

    # and the parameter-list changes stay "signature changed (breaking)"
    for step in ("36ae4059->6dafac00", "b41cee5e->43365523", "390c2f40->ed6ad30f"):
        assert _by_key(steps[step])[GDN_KERNEL].change == SIGNATURE_CHANGED, step
