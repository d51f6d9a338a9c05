"""`ggml-vendor collect`: per-variant artifacts (as the generated workflow's jobs upload them) merged into build/.

Fast tests use small variants compiled here with gcc (tests/helpers/hubserver/variants.py) in a copy of the miniature
kernel package, verified on a "runner" build dir and packed as artifacts: a directory per artifact holding
<variant>/ and .verified.json, or the same as a .zip. Every refusal leaves build/ byte-identical. The slow test
builds two variants for real in two separate checkouts, collects them in a third, verifies, publishes to the
local Hub and loads the result with kernels.get_kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.helpers import BUILD_KERNEL_OUT, built_variants, copy_build_kernel
from tests.helpers.fixture_repos import locked
from tests.helpers.hubserver.variants import compile_so, make_variant, provenance, write_metadata
from toolkit.core import config
from toolkit.core.config import Config
from toolkit.core.hashing import sha256_file
from toolkit.verify import VerifyOptions, stamp_verdict, tree_sha256, verify_build

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "build_kernel"
V1 = "torch214-cxx11-cu130-x86_64-linux"
V2 = "torch214-cxx11-cu130-aarch64-linux"  # an arm64 runner's variant (checked by bytes here, never loaded)
V0 = "torch213-cxx11-cu130-x86_64-linux"
RUNNER_VERIFY = VerifyOptions(smoke=False, check_vendor=False)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed (fixture variants)")


def _cli(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args, "-C", str(root)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


@pytest.fixture
def proj(tmp_path: Path) -> Config:
    root = tmp_path / "checkout"
    copy_build_kernel(root)
    return config.load(root)


def _identity(cfg: Config) -> dict[str, str]:
    from toolkit import __version__
    from toolkit.build.inputs import load_project

    proj = load_project(cfg, tool_version=__version__)
    return {"lock-sha256": sha256_file(cfg.vendor_dir / "UPSTREAM"), "source-id": proj.source_id, "uid": proj.uid}


def _prov(cfg: Config, **override: Any) -> dict[str, Any]:
    lock = locked(cfg.vendor_dir)
    ident = _identity(cfg)
    prov = provenance(commit=lock.commit, url=lock.upstream)
    prov["ggml-vendor"].update({"lock-sha256": ident["lock-sha256"], "source-id": ident["source-id"]})
    for key, value in override.items():
        if key == "kernel":
            prov["kernel"] = value
        else:
            prov["ggml-vendor"][key] = value
    return prov


def _artifact(
    cfg: Config, out: Path, variant: str, *, name: str | None = None, as_zip: bool = False, **prov: Any
) -> Path:
    """What one job uploads: its variant built and verified on its runner, packed as `name` (default: the
    variant's name) under `out`."""
    runner = out.parent / f"runner-{name or variant}" / "build"
    uid = _identity(cfg)["uid"]
    make_variant(
        runner, variant=variant, uid=uid, module=cfg.module, name=cfg.name, archs=["8.0"], prov=_prov(cfg, **prov)
    )
    assert verify_build(cfg, [variant], options=RUNNER_VERIFY, build_dir=runner).ok
    art = out / (name or variant)
    art.mkdir(parents=True)
    shutil.copytree(runner / variant, art / variant)
    shutil.copy2(runner / ".verified.json", art / ".verified.json")
    if not as_zip:
        return art
    zpath = out / f"{art.name}.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for f in sorted(art.rglob("*")):
            zf.write(f, f.relative_to(art).as_posix())
    shutil.rmtree(art)
    return zpath


def _snapshot(d: Path) -> dict[str, bytes]:
    return (
        {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()} if d.exists() else {}
    )


def _record(build: Path) -> dict[str, Any]:
    variants: dict[str, Any] = json.loads((build / ".verified.json").read_text())["variants"]
    return variants


# --- merging ---------------------------------------------------------------------------------------------


def test_collects_artifact_dirs_and_zips_keeps_records_and_verify_passes(proj: Config, tmp_path: Path) -> None:
    arts = tmp_path / "artifacts"  # what download-artifact writes: one entry per artifact
    _artifact(proj, arts, V1)
    _artifact(proj, arts, V2, as_zip=True)
    res = _cli(proj.root, "collect", str(arts), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["committed"] and {v["variant"]: v["action"] for v in doc["variants"]} == {V1: "add", V2: "add"}
    assert "symbols" in doc["variants"][0]["rechecked"] and "abi" in doc["variants"][0]["rechecked"]
    build = proj.build_dir
    assert built_variants(proj.root) == sorted([".verified.json", V1, V2])  # no staging left
    rec = _record(build)
    assert rec[V1]["collected"]["artifact"] == V1 and rec[V2]["collected"]["artifact"] == V2
    assert rec[V1]["collected"]["runner"]["ok"] is True
    for v in (V1, V2):
        assert stamp_verdict(build, build / v) == (True, "")
    # the whole build/ verifies here, and re-verifying keeps where each variant came from
    assert verify_build(proj, options=VerifyOptions(smoke=False)).ok
    assert _record(build)[V2]["collected"]["artifact"] == V2


def test_dry_run_checks_everything_and_changes_nothing(proj: Config, tmp_path: Path) -> None:
    art = _artifact(proj, tmp_path / "a", V1)
    res = _cli(proj.root, "collect", str(art), "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "would add" in res.stdout and "nothing changed" in res.stdout
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone


def test_replaces_its_variants_and_keeps_the_others(proj: Config, tmp_path: Path) -> None:
    first = _artifact(proj, tmp_path / "first", V1, name="old")
    keep = _artifact(proj, tmp_path / "first", V0)
    assert _cli(proj.root, "collect", str(first), str(keep)).returncode == 0
    kept_before = _snapshot(proj.build_dir / V0)
    new = _artifact(proj, tmp_path / "second", V1)
    (new / V1 / "extra.txt").write_text("new build\n")  # a different (still complete and verified) variant
    write_metadata(
        new / V1,
        ident=f"_mini_kernel_cuda_{_identity(proj)['uid']}",
        backend="cuda",
        archs=["8.0"],
        prov=_prov(proj),
        name=proj.name,
    )
    runner_record = json.loads((new / ".verified.json").read_text())
    runner_record["variants"][V1]["tree_sha256"] = tree_sha256(new / V1)
    (new / ".verified.json").write_text(json.dumps(runner_record))
    res = _cli(proj.root, "collect", str(new), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [v["action"] for v in doc["variants"]] == ["replace"] and doc["kept"] == [V0]
    assert (proj.build_dir / V1 / "extra.txt").is_file()
    assert _snapshot(proj.build_dir / V0) == kept_before and _record(proj.build_dir)[V0]["collected"]["artifact"] == V0


def test_an_interrupted_merge_leaves_the_previous_build(
    proj: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit.ci import collect as collect_mod

    assert _cli(proj.root, "collect", str(_artifact(proj, tmp_path / "old", V1, name="old"))).returncode == 0
    before = _snapshot(proj.build_dir)
    arts = tmp_path / "new"
    _artifact(proj, arts, V1)
    _artifact(proj, arts, V2)

    def boom(*a: object, **k: object) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr(collect_mod, "_merge_records", boom)  # after both variants were swapped in
    with pytest.raises(KeyboardInterrupt):
        collect_mod.collect(proj, [arts])
    assert _snapshot(proj.build_dir) == before
    assert built_variants(proj.root) == [".verified.json", V1]


@pytest.mark.parametrize("lands", ["while printing", "before the swap"])
def test_ctrl_c_says_what_build_holds_read_back(
    proj: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lands: str
) -> None:
    """Issue 33 item 3: a Ctrl-C once the plan is made says what build/ holds, read back from disk."""
    from typer.testing import CliRunner

    from toolkit.ci import collect as collect_mod
    from toolkit.cli import app
    from toolkit.commands import collect as collect_command

    def ctrl_c(*a: object, **k: object) -> NoReturn:
        raise KeyboardInterrupt

    if lands == "while printing":
        monkeypatch.setattr(collect_command, "_show", ctrl_c)
    else:
        monkeypatch.setattr(collect_mod, "_commit", ctrl_c)
    art = _artifact(proj, tmp_path / "a", V1)
    res = CliRunner().invoke(app, ["collect", str(art), "-C", str(proj.root)])
    assert res.exit_code == 130 and "previous state kept" not in res.output, res.output
    last = res.output.splitlines()[-1]
    if lands == "while printing":
        assert (
            f"build/ holds the collected {V1} and their records (read back from disk): the collect had completed"
            in last
        )
        assert _snapshot(proj.build_dir / V1) == _snapshot(art / V1)
    else:
        assert "build/ is as it was: nothing was collected (read back from disk)" in last, res.output
        assert not (proj.build_dir / V1).exists()


def test_plan_and_execute_follow_the_stage_protocol(proj: Config, tmp_path: Path) -> None:
    """The plan checks and decides, writing nothing (build/ is not even created); execute carries it out and
    refuses a variant whose artifact changed after the plan checked it (build/ then untouched)."""
    from toolkit.ci import collect as collect_mod
    from toolkit.core import stage

    art = _artifact(proj, tmp_path / "a", V1)
    planned = collect_mod.plan(proj, collect_mod.Request((art,)))
    assert isinstance(planned, stage.Plan) and planned.ok and built_variants(proj.root) == []
    assert planned.lines()[0].startswith(f"would add {V1} from {V1}") and planned.to_json()["dry_run"] is True
    with (art / V1 / "__init__.py").open("a") as fh:
        fh.write("# changed after the plan\n")
    report = collect_mod.execute(planned)
    assert isinstance(report, stage.Report) and not report.ok and stage.exit_code_of(report) == 11
    assert [(r.variant, r.kind) for r in report.refusals] == [(V1, "changed")]
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone
    again = collect_mod.execute(collect_mod.plan(proj, collect_mod.Request((_artifact(proj, tmp_path / "b", V1),))))
    assert (
        again.ok
        and again.committed
        and again.lines()[0]
        == f"added {V1} from {V1} (re-checked here: " + ", ".join(again.incoming[0].rechecked) + ")"
    )
    assert (proj.build_dir / V1 / "metadata.json").is_file()


# --- refusals --------------------------------------------------------------------------------------------


def _rewrite_record(art: Path, variant: str, **changes: Any) -> None:
    doc = json.loads((art / ".verified.json").read_text())
    doc["variants"][variant].update(changes)
    (art / ".verified.json").write_text(json.dumps(doc))


def _redigest(cfg: Config, art: Path, variant: str) -> None:
    meta = json.loads((art / variant / "metadata.json").read_text())
    write_metadata(
        art / variant, ident=meta["id"], backend="cuda", archs=["8.0"], prov=meta["provenance"], name=cfg.name
    )


def _missing_file(cfg: Config, arts: Path) -> None:
    (_artifact(cfg, arts, V2) / V2 / "_ops.py").unlink()


def _altered_file(cfg: Config, arts: Path) -> None:
    p = _artifact(cfg, arts, V2) / V2 / "__init__.py"
    p.write_text(p.read_text() + "# edited after the build\n")


def _changed_after_verify(cfg: Config, arts: Path) -> None:
    art = _artifact(cfg, arts, V2)
    (art / V2 / "__init__.py").write_text((art / V2 / "__init__.py").read_text() + "# rebuilt, not re-verified\n")
    _redigest(cfg, art, V2)  # complete and self-consistent, but not what the runner verified


def _failed_on_runner(cfg: Config, arts: Path) -> None:
    _rewrite_record(_artifact(cfg, arts, V2), V2, ok=False, failures=[f"[fail] {V2}: archs: no sm_80 cubin"])


def _no_record(cfg: Config, arts: Path) -> None:
    (_artifact(cfg, arts, V2) / ".verified.json").unlink()


def _private_unwinder(cfg: Config, arts: Path) -> None:
    """Verified by a runner whose verify did not know this check: collect's own re-check catches it."""
    from tests.helpers.hubserver.variants import build_fatbin

    art = _artifact(cfg, arts, V2)
    meta = json.loads((art / V2 / "metadata.json").read_text())
    compile_so(
        art / V2,
        meta["id"],
        fatbin=build_fatbin([[(80, "", False)]]),
        extra_c="void _Unwind_Resume(void *e) { (void)e; }\n",
    )
    _redigest(cfg, art, V2)
    _rewrite_record(art, V2, tree_sha256=tree_sha256(art / V2))


def _foreign(cfg: Config, arts: Path, variant: str, prov: dict[str, Any]) -> Path:
    """An artifact whose provenance says other sources (`prov`: ggml-vendor provenance keys as the build wrote them)."""
    return _artifact(cfg, arts, variant, **prov)


CASES: dict[str, tuple[Callable[[Config, Path], object], str, str, str]] = {
    "missing-file": (_missing_file, V2, "incomplete", "missing _ops.py"),
    "altered-file": (_altered_file, V2, "incomplete", "__init__.py does not match its digest"),
    "other-sources": (
        lambda c, a: _foreign(c, a, V2, {"source-id": "0" * 64}),
        V2,
        "foreign",
        "built from other sources",
    ),
    "other-lock": (
        lambda c, a: _foreign(c, a, V2, {"lock-sha256": "f" * 64}),
        V2,
        "foreign",
        "another vendor/UPSTREAM",
    ),
    "no-provenance": (
        lambda c, a: _foreign(c, a, V2, {"source-id": None}),
        V2,
        "foreign",
        "records no lock-sha256/source-id",
    ),
    "no-record": (_no_record, V2, "unverified", "has no .verified.json"),
    "failed-on-runner": (_failed_on_runner, V2, "unverified", "verify failed on its runner: [fail]"),
    "changed-after-verify": (_changed_after_verify, V2, "unverified", "differ from the ones verify passed"),
    "duplicate": (
        lambda c, a: _artifact(c, a, V1, name="zz-again"),
        "zz-again",
        "duplicate",
        f"{V1} also comes from {V1}",
    ),
    "misnamed": (lambda c, a: _artifact(c, a, V1, name=V2), V2, "misnamed", f"the artifact {V2} holds {V1}"),
    "private-unwinder": (_private_unwinder, V2, "recheck", "fails here: symbols:"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_artifact_is_refused_by_name_and_build_is_untouched(proj: Config, tmp_path: Path, case: str) -> None:
    from toolkit.ci.collect import collect
    from toolkit.core.errors import CollectError

    make, artifact, kind, reason = CASES[case]
    collect(proj, [_artifact(proj, tmp_path / "before", V0)])
    before = _snapshot(proj.build_dir)
    arts = tmp_path / "artifacts"
    _artifact(proj, arts, V1)  # a good one next to the bad one: it is not merged either
    make(proj, arts)
    with pytest.raises(CollectError) as exc:
        collect(proj, [arts])
    refused = exc.value.report.refusals  # type: ignore[attr-defined]
    assert [(r.artifact, r.kind) for r in refused] == [(artifact, kind)], refused
    assert reason in refused[0].reason
    line = exc.value.one_line()
    assert line.startswith("refused 1") and artifact in line and kind in line and "\n" not in line
    assert _snapshot(proj.build_dir) == before


def test_cli_refusal_is_one_line_exit_11_with_the_json_report(proj: Config, tmp_path: Path) -> None:
    arts = tmp_path / "artifacts"
    _artifact(proj, arts, V1)
    _missing_file(proj, arts)
    res = _cli(proj.root, "collect", str(arts), "--json")
    assert res.returncode == 11, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert not doc["ok"] and not doc["committed"] and [r["kind"] for r in doc["refused"]] == ["incomplete"]
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: refused 1 artifact problem(s); first: artifact {V2}")
    assert "re-run the job that uploaded it" in err[0]
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone


def _deflated(zpath: Path) -> Path:
    """The same zip with every member deflate-compressed (what a browser download of an artifact is)."""
    with zipfile.ZipFile(zpath) as src:
        members = [(i.filename, src.read(i)) for i in src.infolist()]
    with zipfile.ZipFile(zpath, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for name, data in members:
            dst.writestr(name, data)
    return zpath


def _corrupt_the_deflate_stream(zpath: Path, member_suffix: str) -> None:
    with zipfile.ZipFile(zpath) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(member_suffix))
    data = bytearray(zpath.read_bytes())
    name_len, extra_len = (
        int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little"),
        int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little"),
    )
    start = info.header_offset + 30 + name_len + extra_len
    middle = start + info.compress_size // 3
    data[middle : middle + 64] = bytes(range(64))  # garbage inside the compressed bytes; the directory is intact
    zpath.write_bytes(bytes(data))


def test_a_zip_with_a_corrupt_deflate_stream_is_refused_in_one_line(proj: Config, tmp_path: Path) -> None:
    arts = tmp_path / "artifacts"
    _artifact(proj, arts, V1)
    zpath = _deflated(_artifact(proj, arts, V2, as_zip=True))
    _corrupt_the_deflate_stream(zpath, ".so")
    assert zipfile.is_zipfile(zpath)
    res = _cli(proj.root, "collect", str(arts))
    assert res.returncode == 11, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert f"artifact {V2}: incomplete: cannot be read" in res.stderr
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone


def test_a_truncated_zip_among_the_artifacts_is_refused_not_skipped(proj: Config, tmp_path: Path) -> None:
    arts = tmp_path / "artifacts"
    _artifact(proj, arts, V1)
    zpath = _artifact(proj, arts, V2, as_zip=True)
    zpath.write_bytes(zpath.read_bytes()[: zpath.stat().st_size // 2])  # an interrupted download
    res = _cli(proj.root, "collect", str(arts), "--json")
    assert res.returncode == 11, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert [(r["artifact"], r["kind"]) for r in doc["refused"]] == [(V2, "incomplete")]
    assert "not a readable zip" in doc["refused"][0]["reason"] and not doc["committed"]
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone


@pytest.mark.parametrize("as_zip", [False, True])
def test_a_named_pipe_in_a_variant_is_refused(proj: Config, tmp_path: Path, as_zip: bool) -> None:
    arts = tmp_path / "artifacts"
    art = _artifact(proj, arts, V1)
    os.mkfifo(art / V1 / "pipe")
    if as_zip:  # a zip member whose mode says FIFO
        zpath = arts / f"{V1}.zip"
        with zipfile.ZipFile(zpath, "w") as zf:
            for f in sorted(art.rglob("*")):
                info = zipfile.ZipInfo(f.relative_to(art).as_posix())
                if f.name == "pipe":
                    info.external_attr = (0o010644) << 16
                    zf.writestr(info, b"")
                elif f.is_file():
                    zf.write(f, info.filename)
        shutil.rmtree(art)
    proc = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "collect", str(arts), "-C", str(proj.root)],
        capture_output=True,
        text=True,
        timeout=300,  # a pipe that is opened for reading would block: the test must end either way
    )
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert "named pipe" in proc.stderr and "pipe" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone


def test_a_symbolic_link_in_an_artifact_is_refused_by_verify_s_rule(proj: Config, tmp_path: Path) -> None:
    """collect, verify and publish share one rule for what a variant may hold (toolkit.verify's
    non_regular): a link to a file outside is refused in one line naming it, nothing of it copied."""
    art = _artifact(proj, tmp_path / "artifacts", V1)
    outside = tmp_path / "outside.py"
    outside.write_bytes((art / V1 / "__init__.py").read_bytes())
    (art / V1 / "__init__.py").unlink()
    (art / V1 / "__init__.py").symlink_to(outside)
    proc = _cli(proj.root, "collect", str(art))
    assert proc.returncode == 11, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"{V1}/__init__.py is a symbolic link to {str(outside)!r}, outside the variant" in proc.stderr
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone


def test_collected_files_are_copies_not_links_to_the_artifact(proj: Config, tmp_path: Path) -> None:
    art = _artifact(proj, tmp_path / "a", V1)
    assert _cli(proj.root, "collect", str(art)).returncode == 0
    shipped = proj.build_dir / V1 / "__init__.py"
    before = shipped.read_bytes()
    assert shipped.stat().st_nlink == 1
    with (art / V1 / "__init__.py").open("a") as fh:  # the artifact directory is reused or edited later
        fh.write("# changed in the artifact after collect\n")
    assert shipped.read_bytes() == before
    assert stamp_verdict(proj.build_dir, proj.build_dir / V1) == (True, "")


def test_staging_left_by_killed_runs_is_removed_and_a_live_one_kept(proj: Config, tmp_path: Path) -> None:
    build = proj.build_dir
    dead = build / ".collect-999999999-0badcafe"  # named like any run's staging, its process long gone
    (dead / "a0" / V1).mkdir(parents=True)
    (dead / "a0" / V1 / "x.so").write_bytes(b"\x7fELF" + b"0" * 64)
    old_style = build / ".collect-k2j4h5"  # what runs before the pid was in the name left
    old_style.mkdir()
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    live = build / f".collect-{alive.pid}-0123abcd"  # a dry run still at work beside us
    live.mkdir()
    try:
        res = _cli(proj.root, "collect", str(_artifact(proj, tmp_path / "a", V1)))
        assert res.returncode == 0, res.stdout + res.stderr
        assert not dead.exists() and not old_style.exists() and live.is_dir()
        assert built_variants(proj.root) == sorted([live.name, ".verified.json", V1])
    finally:
        assert alive.stdin is not None
        alive.stdin.close()
        alive.wait(timeout=30)


def _changed_artifact(cfg: Config, out: Path) -> Path:
    """A newer build of V1 (one more file), complete and verified on its runner."""
    new = _artifact(cfg, out, V1)
    (new / V1 / "extra.txt").write_text("new build\n")
    ident = f"_mini_kernel_cuda_{_identity(cfg)['uid']}"
    write_metadata(new / V1, ident=ident, backend="cuda", archs=["8.0"], prov=_prov(cfg), name=cfg.name)
    _rewrite_record(new, V1, tree_sha256=tree_sha256(new / V1))
    return new


@pytest.mark.parametrize(("exchange", "kill_at"), [(True, 1), (False, 1), (False, 2), (False, 3)])
def test_a_collect_killed_mid_swap_never_loses_the_variant(
    proj: Config, tmp_path: Path, exchange: bool, kill_at: int
) -> None:
    """SIGKILL at each step of the variant swap (the atomic exchange, or the journaled two-rename fallback):
    build/ holds the old or the new variant, complete (after the fallback's second step, once the next run
    has rolled the swap back), and the next collect finishes cleanly."""
    assert _cli(proj.root, "collect", str(_artifact(proj, tmp_path / "old", V1, name="old"))).returncode == 0
    old = _snapshot(proj.build_dir / V1)
    new_art = _changed_artifact(proj, tmp_path / "new")
    new = _snapshot(new_art / V1)
    env = {**os.environ, "GGML_VENDOR_KILL_AT": str(kill_at)}
    if not exchange:
        env["GGML_VENDOR_NO_EXCHANGE"] = "1"
    killed = _cli(proj.root, "collect", str(new_art), env=env)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    if kill_at != 2 or exchange:  # the fallback's only gap, between its renames, is what the journal covers
        assert _snapshot(proj.build_dir / V1) in (old, new)
    res = _cli(proj.root, "collect", str(new_art))
    assert res.returncode == 0, res.stdout + res.stderr
    assert _snapshot(proj.build_dir / V1) == new
    assert built_variants(proj.root) == [".verified.json", V1]  # nothing left behind
    assert stamp_verdict(proj.build_dir, proj.build_dir / V1) == (True, "")


def test_the_next_run_puts_back_a_variant_a_kill_left_moved_aside(proj: Config, tmp_path: Path) -> None:
    assert _cli(proj.root, "collect", str(_artifact(proj, tmp_path / "old", V1, name="old"))).returncode == 0
    old = _snapshot(proj.build_dir / V1)
    env = {**os.environ, "GGML_VENDOR_KILL_AT": "2", "GGML_VENDOR_NO_EXCHANGE": "1"}
    new_art = _changed_artifact(proj, tmp_path / "new")
    assert _cli(proj.root, "collect", str(new_art), env=env).returncode == -9
    assert not (proj.build_dir / V1).exists()  # killed between the two renames
    # a run that changes nothing else (its artifact is refused) still rolls the interrupted swap back first
    bad = _artifact(proj, tmp_path / "bad", V2)
    (bad / V2 / "_ops.py").unlink()
    assert _cli(proj.root, "collect", str(bad)).returncode == 11
    assert _snapshot(proj.build_dir / V1) == old
    assert built_variants(proj.root) == [".verified.json", V1]


@pytest.mark.parametrize("command", [("verify",), ("status",), ("publish", "--dry-run"), ("build", "--dry-run")])
def test_any_next_command_puts_back_a_variant_a_kill_left_moved_aside(
    proj: Config, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """Issue 33 item 8: the journaled fallback's gap (killed between its two renames) is closed by whatever
    command runs next in the project, not only by the next collect."""
    assert _cli(proj.root, "collect", str(_artifact(proj, tmp_path / "old", V1, name="old"))).returncode == 0
    old = _snapshot(proj.build_dir / V1)
    env = {**os.environ, "GGML_VENDOR_KILL_AT": "2", "GGML_VENDOR_NO_EXCHANGE": "1"}
    assert _cli(proj.root, "collect", str(_changed_artifact(proj, tmp_path / "new")), env=env).returncode == -9
    assert not (proj.build_dir / V1).exists()  # killed between the two renames
    res = _cli(proj.root, *command)
    assert "Traceback" not in res.stderr, res.stderr
    assert _snapshot(proj.build_dir / V1) == old, res.stdout + res.stderr
    assert not list(proj.build_dir.glob("*.journal"))  # (dead runs' staging goes with the next collect)


def test_another_commit_is_refused(proj: Config, tmp_path: Path) -> None:
    root = proj.root
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "fixture"], check=True)
    arts = tmp_path / "artifacts"
    _artifact(proj, arts, V1, kernel={"commit": "a" * 40, "dirty": False})
    res = _cli(root, "collect", str(arts))
    assert res.returncode == 11 and "foreign: built from commit aaaaaaaaaaaa" in res.stderr
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone


def test_not_an_artifact(proj: Config, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    res = _cli(proj.root, "collect", str(tmp_path / "empty"), str(tmp_path / "nope"))
    assert res.returncode == 11
    assert "not-an-artifact" in res.stderr and "holds no <variant>/metadata.json" in res.stderr
    variant_dir = _artifact(proj, tmp_path / "a", V1) / V1
    res = _cli(proj.root, "collect", str(variant_dir))
    assert res.returncode == 11 and "is a variant directory; pass the artifact that holds it" in res.stderr
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone


# --- two real builds on two "runners", merged, verified, published, loaded ------------------------------


def _why_no_real_build() -> str | None:
    from toolkit.build.envs import detect_cuda_toolkits
    from toolkit.build.torchenvs import discover_envs

    if not detect_cuda_toolkits():
        return "nvcc (a CUDA toolkit) is not installed"
    env = next((e for e in discover_envs() if not e.managed), None)
    if env is None or not env.cuda:
        return "a CUDA build of torch is not installed"
    if env.torch_minor != "2.14" or env.compute != "cu130":
        return f"the fixture's runners expect torch 2.14 for cu130 (this is {env.version})"
    return None


def _relabelled_torch_env(venv: Path, cuda: str) -> Path:
    """A real virtual environment (so its python starts as it, inside a venv or not) whose torch/version.py
    says CUDA `cuda`; a .pth puts the running interpreter's torch behind it, so importing torch there loads
    the real package (a regular package wins over the version.py-only directory). Returns its
    site-packages."""
    import sysconfig
    import venv as venv_module

    import torch

    venv_module.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(venv)
    rel = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    site = venv / rel
    (site / "torch").mkdir(parents=True)
    real = Path(torch.__file__).parent
    lines = [
        (f"cuda: Optional[str] = {cuda!r}" if ln.startswith("cuda") else ln)
        for ln in (real / "version.py").read_text().splitlines()
    ]
    (site / "torch" / "version.py").write_text("\n".join(lines) + "\n")
    (site / "real-torch.pth").write_text(str(real.parent) + "\n")
    # Its torch/lib is the real one's, as in a real environment of that torch: verify resolves the variant's
    # unversioned imports against the libraries of the torch it was built with.
    (site / "torch" / "lib").symlink_to(real / "lib", target_is_directory=True)
    return site


def test_the_relabelled_torch_env_imports_the_real_torch(tmp_path: Path) -> None:
    # Runner B's environment must start as itself and find torch inside a virtualenv too (it once was a
    # symlink to this interpreter, which starts the base interpreter there, without torch).
    pytest.importorskip("torch", reason="the relabelled environment wraps this interpreter's torch")
    import torch

    site = _relabelled_torch_env(tmp_path / "env", "13.2")
    python = tmp_path / "env" / "bin" / "python"
    code = "import sys, torch, torch.utils.cpp_extension as ce; print(sys.prefix); print(torch.__file__)"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    prefix, torch_file = proc.stdout.split()[-2:]
    assert Path(prefix) == tmp_path / "env" and Path(torch_file) == Path(torch.__file__)
    from toolkit.build.torchenvs import discover_envs

    env = next(e for e in discover_envs(tmp_path) if e.managed)
    assert env.cuda == "13.2" and Path(env.torch_dir) == site / "torch"


@pytest.mark.slow
def test_two_runners_collected_verified_published_and_loaded(tmp_path: Path) -> None:
    """Runner A builds the host variant (torch 2.14, cu130). This machine has one torch, so runner B builds the
    cu132 row of its matrix against the same torch relabelled CUDA 13.2 (a torch environment whose version.py
    says cuda 13.2; its metadata still records the torch and nvcc that really built it). Both builds, the
    artifacts, the merge, verify, publish and get_kernel are real."""
    why = _why_no_real_build()
    if why:
        pytest.skip(why)

    from toolkit.testing.hub_state import HubState
    from toolkit.testing.localhub import HubServer

    a, b, c = (tmp_path / n for n in ("runner-a", "runner-b", "publisher"))
    for d in (a, b, c):
        copy_build_kernel(d)
    with (b / "variants" / "matrix.toml").open("a") as fh:
        fh.write('\n[[build]]\nbackend = "cuda"\ntorch = ["2.14"]\ntoolkits = ["13.2"]\nsystems = ["x86_64-linux"]\n')
    envs = tmp_path / "envs"
    site = _relabelled_torch_env(envs / "torch214-cu132", "13.2")
    assert (site / "torch" / "version.py").is_file()

    arts = tmp_path / "artifacts"
    for root, variant, extra_env in (
        (a, V1, {}),
        (b, "torch214-cxx11-cu132-x86_64-linux", {"GGML_VENDOR_ENVS": str(envs)}),
    ):
        env = {**os.environ, **extra_env, "GGML_VENDOR_BUILD_CACHE": str(root / ".runner-cache")}
        res = _cli(root, "build", "--variant", variant, "-j", "2", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        res = _cli(root, "verify", variant, "--no-smoke", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        shutil.copytree(root / BUILD_KERNEL_OUT / variant, arts / variant / variant)  # upload-artifact's layout
        shutil.copy2(root / BUILD_KERNEL_OUT / ".verified.json", arts / variant / ".verified.json")

    res = _cli(c, "collect", str(arts), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(v["variant"] for v in json.loads(res.stdout)["variants"]) == [V1, "torch214-cxx11-cu132-x86_64-linux"]
    res = _cli(c, "verify")  # the whole build/, with the import test where this host can load a variant
    assert res.returncode == 0, res.stdout + res.stderr

    with HubServer(HubState(tokens=("tok",))) as hub:
        env = {**os.environ, "HF_TOKEN": "tok"}
        res = _cli(c, "publish", "--endpoint", hub.url, env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        v1 = hub.state.history("kernel", "tests/mini-kernel", "v1")[0].files
        assert {p.split("/")[1] for p in v1 if p.startswith("build/")} == {V1, "torch214-cxx11-cu132-x86_64-linux"}
        code = (
            "import torch, kernels\n"
            "k = kernels.get_kernel('tests/mini-kernel', version=1, trust_remote_code=True)\n"
            "ops = getattr(torch.ops, k.__name__)\n"
            "try:\n    ops.scale(torch.ones(2), 2.0)\nexcept RuntimeError as e:\n    print('RAISED', str(e).splitlines()[0])\n"
            "print('RESULT', k.__name__, ops.revision())\n"
        )
        load_env = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_CACHE": str(tmp_path / "hf"),
            "KERNELS_CACHE": str(tmp_path / "hf"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_HUB_OFFLINE": "0",
        }
        load_env.pop("HF_HUB_DISABLE_TELEMETRY", None)
        load_env.pop("HF_TOKEN", None)
        proc = subprocess.run([sys.executable, "-c", code], env=load_env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        meta = json.loads((c / BUILD_KERNEL_OUT / V1 / "metadata.json").read_text())
        assert f"RESULT {meta['id']} 7" in proc.stdout
        assert "RAISED scale: x must be a contiguous float32 CUDA tensor" in proc.stdout
        # kernels resolved and downloaded the host's variant (cu130), not runner B's cu132 one
        paths = [r[1] for r in hub.state.requests]
        assert any("/resolve/" in p and V1 in p for p in paths)
        assert not any("/resolve/" in p and "cu132" in p for p in paths)


def test_without_the_lock_there_is_nothing_to_compare_with(proj: Config, tmp_path: Path) -> None:
    art = _artifact(proj, tmp_path / "a", V1)
    (proj.vendor_dir / "UPSTREAM").unlink()
    res = _cli(proj.root, "collect", str(art))
    assert res.returncode == 11 and len(res.stderr.strip().splitlines()) == 1
    assert "vendor/UPSTREAM is missing" in res.stderr and "checkout the artifacts were built from" in res.stderr
    assert built_variants(proj.root) == []  # build/<name>/ holds its rendered src/ alone
