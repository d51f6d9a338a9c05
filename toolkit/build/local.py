"""The local executor: runs a BuildPlan's steps on this host in parallel through the build cache, then
assembles each variant into build/<variant>/ atomically (assembly.py; outdir.py stages it and swaps it in).

Each step is a compiler invocation whose result is cached by content (cache.py); a step shared by several
variants (a torch-independent kernel object) runs once. A variant whose inputs and output are unchanged is
left alone ("up-to-date") without a single compiler invocation and without importing torch or kernels.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.build.assembly import VariantAssembly
from toolkit.build.cache import BuildCache, digest_strings, parse_depfile, scratch_prefix
from toolkit.build.fixedtu import key_tag as tu_key_tag
from toolkit.build.fixedtu import through_stand_in
from toolkit.build.geninclude import GLIBC_COMPAT, GLIBC_COMPAT_C, LIBSTDCXX_COMPAT, LIBSTDCXX_COMPAT_CPP, cublas_dir
from toolkit.build.metal import embed_metallib
from toolkit.build.outdir import clean_stale_stages
from toolkit.build.outdir import variant_intact as variant_intact  # re-exported: callers import it from here
from toolkit.build.results import RunStats, StepResult, VariantResult
from toolkit.core import fs
from toolkit.core.errors import BuildError, Interrupted

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from toolkit.build.inputs import Provenance
    from toolkit.build.stepcontext import Step
    from toolkit.build.steps import BuildPlan, VariantPlan


def toolchain_env(tmp: Path | None = None) -> dict[str, str]:
    """Environment for compiler subprocesses: deterministic locale and timestamps, no colour codes in logs;
    `tmp` (the step's scratch dir, prefix-mapped in its command line) takes nvcc's tmpxft files."""
    env = dict(os.environ)
    env.update(LC_ALL="C", LANG="C", TERM="dumb", SOURCE_DATE_EPOCH="0")
    if tmp is not None:
        env.update(TMPDIR=str(tmp), TMP=str(tmp), TEMP=str(tmp))
    return env


def spawn_compiler(argv: list[str], cwd: Path, tmp: Path) -> subprocess.Popen[str]:
    """One compiler, in the build's own process group (no new session): a signal to the group, SIGKILL
    included, reaches the compilers too, and Ctrl-C stops them with us. Its temp files go to `tmp`."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=toolchain_env(tmp),
    )


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, deepest first (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out[::-1]


@dataclass
class _Run:
    """The state of one executor run: steps not started, running and failed, who needs each step."""

    variants: tuple[VariantPlan, ...]
    pending: dict[str, Step]
    running: dict[Future[StepResult], str] = field(default_factory=dict)
    users: dict[str, list[VariantPlan]] = field(default_factory=dict)
    results: dict[str, VariantResult] = field(default_factory=dict)
    failed: dict[str, StepResult] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    progress: Progress | None = None
    tasks: dict[str, TaskID] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = {v.name: time.monotonic() for v in self.variants}


class LocalExecutor(VariantAssembly):
    """Runs the plan's steps (scheduling, the cache, the compilers); VariantAssembly writes the variants."""

    def __init__(
        self,
        plan: BuildPlan,
        cache: BuildCache,
        *,
        jobs: int,
        provenance: Provenance,
        log_dir: Path,
        gen_dir: Path,
        lock_sha: str = "",
        progress: bool = True,
    ) -> None:
        self.plan = plan
        self.cache = cache
        self.jobs = max(1, jobs)
        self.prov = provenance
        self.log_dir = log_dir
        self.gen_dir = gen_dir
        self.lock_sha = lock_sha
        self.progress = progress
        self.root = plan.project.root
        self.home = plan.project.project_root  # variants' out_dir is relative to it
        self.stats = RunStats()
        self._procs: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._results: dict[str, StepResult] = {}
        self._owner: dict[str, str] = {}  # step id -> the first variant using it (counted there only)

    # -- one step -----------------------------------------------------------------------------------------
    def step_key(self, step: Step) -> str:
        parts = ["ggml-vendor-step-v1", step.kind, step.toolchain, *step.argv]
        if step.tool == "nvcc" and step.kind == "compile":
            parts.append(tu_key_tag())  # the fixed path nvcc compiles from names what it makes
        for rel in step.inputs:
            h = self.cache.file_hash(rel)
            if h is None:
                raise BuildError(f"{rel} (input of {step.label}) does not exist", "run `ggml-vendor render`")
            parts.append(f"{rel}={h}")
        parts.append(f"lock={self.lock_sha}")
        parts += [self._results[a].key for a in step.after]
        return digest_strings(*parts)

    def _run_step(self, step: Step) -> StepResult:
        res = StepResult(step)
        if self._cancel.is_set():
            res.ok, res.error = False, "interrupted"
            return res
        try:
            res.key = self.step_key(step)
        except BuildError as exc:
            res.ok, res.error = False, exc.one_line()
            return res
        kind = step.id.split("-")[0]
        entry = self.cache.lookup(kind, res.key)
        if entry is not None:
            res.entry, res.hit = entry.path, True
            return res
        t0 = time.monotonic()
        with fs.scratch(self.cache.root / "tmp", scratch_prefix(step.id)) as tmp:
            out, dep = tmp / step.output, tmp / (step.output + ".d")
            inputs = [str(self._results[a].entry / self.plan.steps[a].output) for a in step.after]  # type: ignore[operator]
            argv: list[str] = []
            for a in step.argv:
                if a == "{inputs}":
                    argv += inputs
                else:
                    argv.append(a.replace("{out}", str(out)).replace("{dep}", str(dep)).replace("{tmp}", str(tmp)))
            if step.tool == "nvcc" and step.kind == "compile":
                argv = through_stand_in(argv, self.root)  # a fixed path names nvcc's anonymous namespaces
            if step.tool == "python":  # in-process helper (not a compiler invocation)
                # The checking, atomic embed of the Metal backend (the metallib must parse and target
                # macOS >= facts.METAL_MIN_MACOS; verify checks the kernels it holds).
                embed_metallib(Path(inputs[0]), out, argv[-1])
                rc, text = 0, ""
            else:
                rc, text = self._spawn(argv, tmp)
                with self._lock:
                    self.stats.compiler_invocations += 1
                    self.stats.per_tool[step.tool] = self.stats.per_tool.get(step.tool, 0) + 1
            res.seconds = time.monotonic() - t0
            res.output = f"$ {' '.join(argv)}\n{text}"
            if self._cancel.is_set():
                res.ok, res.error = False, "interrupted"
            elif rc != 0 or not out.is_file():
                res.ok, res.error = False, f"{step.tool} exited with status {rc}"
            else:
                deps = parse_depfile(dep.read_text()) if dep.is_file() else []
                entry = self.cache.store(
                    kind, res.key, {step.output: out}, deps, {"label": step.label, "seconds": round(res.seconds, 3)}
                )
                res.entry = entry.path
        return res

    def _spawn(self, argv: list[str], tmp: Path) -> tuple[int, str]:
        # Spawned and registered under the lock that _kill_all takes, after checking for cancellation: a
        # compiler can never start unseen by an interrupt (and then run on for minutes).
        with self._lock:
            if self._cancel.is_set():
                return 130, "interrupted"
            try:
                proc = spawn_compiler(argv, self.root, tmp)
            except OSError as exc:
                return 127, f"cannot run {argv[0]}: {exc}"
            self._procs.add(proc)
        try:
            text, _ = proc.communicate()
        finally:
            with self._lock:
                self._procs.discard(proc)
        return proc.returncode, text

    def _kill_all(self) -> None:
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            for pid in (*descendants(proc.pid), proc.pid):  # nvcc's cicc/ptxas/host compiler, zig's clang
                try:
                    os.kill(pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass

    # -- the run ------------------------------------------------------------------------------------------
    def run(self, variants: tuple[VariantPlan, ...]) -> list[VariantResult]:
        t_start = time.monotonic()
        self._prepare_dirs(variants)
        run = _Run(variants, {s.id: s for s in self.plan.steps_for(variants)})
        for v in variants:
            for sid in v.steps:
                run.users.setdefault(sid, []).append(v)
        self._owner = {sid: vs[0].name for sid, vs in run.users.items()}
        run.progress, run.tasks = self._progress(variants)
        try:
            self._schedule(run)
        except KeyboardInterrupt:
            raise Interrupted(
                "build interrupted", "no variant in build/ was half-written; re-run to continue"
            ) from None
        finally:
            if run.progress is not None:
                run.progress.stop()
        for v in variants:
            run.results.setdefault(v.name, self._failed(v, run.failed, run.started[v.name]))
        self.stats.seconds = time.monotonic() - t_start
        out = [run.results[v.name] for v in variants]
        for v, r in zip(variants, out):
            self._write_log(v, r)
        return out

    def _prepare_dirs(self, variants: tuple[VariantPlan, ...]) -> None:
        (self.cache.root / "tmp").mkdir(parents=True, exist_ok=True)
        fs.stale_entries(self.cache.root / "tmp", "*")  # what killed runs left (SIGKILL skips our cleanup)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.gen_dir.mkdir(parents=True, exist_ok=True)
        for name, text in ((GLIBC_COMPAT_C, GLIBC_COMPAT), (LIBSTDCXX_COMPAT_CPP, LIBSTDCXX_COMPAT)):
            f = self.gen_dir / name
            if not f.is_file() or f.read_text() != text:
                fs.atomic_write(f, text.encode())
        clean_stale_stages(self.home / self.plan.project.out_base)
        self._materialize_cublas(variants)

    def _schedule(self, run: _Run) -> None:
        """Run every pending step as its inputs are ready, at most `jobs` at once; assemble each variant as
        soon as its link is done. Any exception (Ctrl-C included) stops the running compilers first."""
        pool = ThreadPoolExecutor(max_workers=self.jobs)
        # Not a `with` block: its exit would wait for running compilers before our Ctrl-C handler could
        # stop them.
        try:
            while run.pending or run.running:
                self._submit_ready(run, pool)
                if not run.running:
                    self._check_progress(run)
                    continue
                finished, _ = wait(list(run.running), timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in finished:
                    self._collect(run, run.running.pop(fut), fut.result())
                self._assemble_ready(run)
        except BaseException:
            self._cancel.set()
            self._kill_all()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _submit_ready(self, run: _Run, pool: ThreadPoolExecutor) -> None:
        doomed = {v.name for v in run.variants if any(x in run.failed for x in v.steps)}
        for sid, s in list(run.pending.items()):
            if len(run.running) >= self.jobs:
                break
            bad = [a for a in s.after if a in run.failed]
            if bad:
                run.failed[sid] = run.failed[bad[0]]
                run.pending.pop(sid)
            elif all(v.name in doomed for v in run.users.get(sid, [])):
                run.pending.pop(sid)  # every variant needing this step already failed: do not spend minutes on it
            elif all(a in self._results for a in s.after):
                run.running[pool.submit(self._run_step, s)] = sid
                run.pending.pop(sid)

    def _check_progress(self, run: _Run) -> None:
        ready = (all(a in self._results or a in run.failed for a in s.after) for s in run.pending.values())
        if run.pending and not any(ready):
            raise BuildError(
                "internal: build steps wait on each other", "report this as a ggml-vendor bug with the --dry-run output"
            )

    def _collect(self, run: _Run, sid: str, res: StepResult) -> None:
        if res.ok:
            self._results[sid] = res
            if res.hit:
                with self._lock:
                    self.stats.cache_hits += 1
        else:
            run.failed[sid] = res
        for v in run.users.get(sid, []):
            if run.progress is not None:
                run.progress.advance(run.tasks[v.name])
                run.progress.update(run.tasks[v.name], description=f"{v.name}: {res.step.label}")

    def _assemble_ready(self, run: _Run) -> None:
        """Assemble every variant whose link is done (in this thread: renames are ours alone)."""
        for v in run.variants:
            if v.name in run.results or v.link is None or v.link not in self._results:
                continue
            run.results[v.name] = self._assemble(v, run.started[v.name])
            if run.progress is not None:
                done = f"{v.name}: {run.results[v.name].result}"
                run.progress.update(run.tasks[v.name], completed=len(v.steps) + 1, description=done)

    def _materialize_cublas(self, variants: tuple[VariantPlan, ...]) -> None:
        """Copy cublas*.h from the nvidia-cublas wheel into the planned include dir (see envs.Toolkit)."""
        for v in variants:
            tk = v.status.toolkit
            if tk is None or not tk.cublas_headers:
                continue
            dest = Path(cublas_dir(str(self.gen_dir), tk.cublas_headers))
            if dest.is_dir():
                continue
            # keep_existing: another build that made it first made the same copy
            with fs.staged(dest, ".cublas-", keep_existing=True) as tmp:
                for header in Path(tk.cublas_headers).glob("cublas*.h"):
                    shutil.copy2(header, tmp / header.name)

    def _progress(self, variants: tuple[VariantPlan, ...]) -> tuple[Progress | None, dict[str, TaskID]]:
        from toolkit.core import ui

        if not self.progress or not ui.err.is_terminal:
            return None, {}
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=ui.err,
            transient=True,
        )
        tasks = {v.name: progress.add_task(v.name, total=len(v.steps) + 1) for v in variants}
        progress.start()
        return progress, tasks
