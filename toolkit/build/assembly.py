"""Assembling build/<variant>/ once its link is done: the Python package (the op id filled into _ops.py),
metadata.json (provenance, digest, checked by kernels' own parser), the up-to-date stamp, the atomic swap
into place (outdir.py), and each variant's result line and log.

Split from toolkit/build/local.py, whose LocalExecutor schedules and runs the steps and mixes this in: what a
variant *is* changes for other reasons than how its steps are run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.build.cache import BuildCache, digest_strings
from toolkit.build.outdir import intact_files, variant_stage
from toolkit.build.results import StepResult, VariantResult
from toolkit.core import ggml_facts
from toolkit.core.errors import BuildError
from toolkit.core.kernels_client import KERNELS_MINVER

if TYPE_CHECKING:
    from toolkit.build.inputs import Provenance
    from toolkit.build.steps import BuildPlan, VariantPlan

LOG_TAIL_LINES = 25

OPS_TOKEN = ggml_facts.OPS_NAME_PLACEHOLDER  # in a rendered _ops.py, replaced by the build's op id


class VariantAssembly:
    """The assembling half of the local executor (LocalExecutor sets these attributes and fills _results)."""

    plan: BuildPlan
    cache: BuildCache
    prov: Provenance
    log_dir: Path
    root: Path
    home: Path
    _results: dict[str, StepResult]
    _owner: dict[str, str]

    def _counts(self, v: VariantPlan) -> tuple[int, int]:
        """(compiled, cached) steps of `v`, a step shared by several variants counted once, for the first of
        them in the plan (so the column adds up to the run's totals)."""
        rs = [self._results[s] for s in v.steps if s in self._results and self._owner.get(s, v.name) == v.name]
        return (sum(1 for r in rs if not r.hit and r.step.compiles), sum(1 for r in rs if r.hit))

    def _failed(self, v: VariantPlan, failed: dict[str, StepResult], t0: float) -> VariantResult:
        first = next((failed[s] for s in v.steps if s in failed), None)
        compiles, hits = self._counts(v)
        if first is None or first.error == "interrupted":
            result, reason, step, tail = "interrupted" if first else "failed", "stopped before completion", "", ""
        else:
            result, reason, step = "failed", f"{first.step.label}: {first.error}", first.step.label
            tail = "\n".join(first.output.strip().splitlines()[-LOG_TAIL_LINES:])
        return VariantResult(
            v.name,
            result,
            reason,
            v.out_dir,
            v.ops_id,
            v.archs,
            time.monotonic() - t0,
            compiles,
            hits,
            str(self.log_dir / f"{v.name}.log"),
            step,
            tail,
        )

    def _write_log(self, v: VariantPlan, r: VariantResult) -> None:
        lines = [f"# {v.name}: {r.result} {r.reason}".rstrip()]
        for sid in v.steps:
            res = self._results.get(sid)
            step = self.plan.steps[sid]
            if res is None:
                lines.append(f"## {step.label}: not completed")
                continue
            state = "cache hit" if res.hit else f"ran in {res.seconds:.1f}s"
            lines.append(f"## {step.label}: {state} (key {res.key[:16]})")
            if res.output:
                lines.append(res.output.rstrip())
        if r.tail:
            lines += ["## failing step output (tail)", r.tail]
        (self.log_dir / f"{v.name}.log").write_text("\n".join(lines) + "\n")

    # -- assembling build/<variant>/ ------------------------------------------------------------------------
    def _python_files(self, v: VariantPlan) -> dict[str, bytes]:
        proj = self.plan.project
        base = self.root / "torch-ext" / proj.module
        files: dict[str, bytes] = {}
        for rel in proj.python_files:
            data = (base / rel).read_bytes()
            if rel == "_ops.py":
                data = data.replace(OPS_TOKEN.encode(), v.ops_id.encode())
            files[rel] = data
        return files

    def metadata(self, v: VariantPlan) -> dict[str, Any]:
        """metadata.json without its digest (docs/hub-contract.md §2.6). Our own provenance rides in
        provenance["ggml-vendor"] (kernels 0.17.2 accepts the extra key; the upstream revision has no
        standard field)."""
        proj, prov, st = self.plan.project, self.prov, v.status
        # Schema shared with verify (toolkit/verify/provenance.py): tool-version, upstream{url,commit,layout},
        # patches[{name,sha256}], dirty (vendor/ differs from the lock, or there is no lock at all).
        ours: dict[str, Any] = {
            "tool-version": proj.tool_version,
            "upstream": {"url": prov.upstream_url, "commit": prov.upstream_commit, "layout": prov.layout},
            "patches": [{"name": n, "sha256": h} for n, h in prov.patches],
            "dirty": True if prov.vendor_dirty is None else prov.vendor_dirty,
            "lock-sha256": prov.lock_sha256,
            "source-id": proj.source_id,
            "torch": st.env.version if st.env else None,
            "toolkit": (
                f"{st.toolkit.backend} {st.toolkit.full_version or st.toolkit.version}" if st.toolkit else None
            ),
        }
        if self.plan.toolchain:
            # exact tool versions (no local paths: metadata.json is published): the host C++ toolchain (zig +
            # target + wrapper hash, or the system compiler's version line); torch and toolkit are above.
            ours["toolchain"] = dict(self.plan.toolchains.get(v.name) or self.plan.toolchain)
        provenance: dict[str, Any] = {"kernel-builder": {"version": f"ggml-vendor {proj.tool_version}"}}
        if prov.kernel_commit:
            provenance["kernel"] = {"commit": prov.kernel_commit, "dirty": prov.kernel_dirty}
        provenance["ggml-vendor"] = ours
        meta: dict[str, Any] = {
            "name": proj.name,
            "id": v.ops_id,
            "version": proj.version,
            "license": proj.license,
            "python-depends": [],
            "backend": {"type": v.variant.backend, "archs": list(v.archs)},
            # the oldest client the packages are tested under; clients from 0.18 refuse a newer minver
            "kernels-minver": KERNELS_MINVER,
            "provenance": provenance,
        }
        if proj.upstream and "://" in proj.upstream:
            meta["upstream"] = proj.upstream
        return meta

    def _assemble(self, v: VariantPlan, t0: float) -> VariantResult:
        link = self._results[v.link]  # type: ignore[index]
        py = self._python_files(v)
        meta = self.metadata(v)
        stamp = digest_strings(
            link.key,
            *(f"{k}={hashlib.sha256(d).hexdigest()}" for k, d in sorted(py.items())),
            json.dumps(meta, sort_keys=True),
        )
        final = self.home / v.out_dir
        compiles, hits = self._counts(v)
        log = str(self.log_dir / f"{v.name}.log")
        old = self.cache.read_stamp(v.name) or {}
        files = intact_files(final) if old.get("stamp") == stamp else None  # metadata.json read once
        if files is not None and old.get("files") == files:
            return VariantResult(
                v.name, "up-to-date", "", v.out_dir, v.ops_id, v.archs, time.monotonic() - t0, compiles, hits, log
            )
        with variant_stage(final) as stage:
            self._fill_variant(v, stage, link, py, meta)
        self.cache.write_stamp(
            v.name, {"stamp": stamp, "id": v.ops_id, "link-key": link.key, "files": meta["digest"]["files"]}
        )
        return VariantResult(
            v.name, "built", "", v.out_dir, v.ops_id, v.archs, time.monotonic() - t0, compiles, hits, log
        )

    def _fill_variant(
        self, v: VariantPlan, stage: Path, link: StepResult, py: dict[str, bytes], meta: dict[str, Any]
    ) -> None:
        """Write build/<variant>/'s files into `stage`: the .so, the Python package, metadata.json (its
        digest computed last, over what is staged)."""
        shutil.copy2(link.entry / v.so_name, stage / v.so_name)  # type: ignore[operator]
        for rel, data in py.items():
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            (stage / rel).write_bytes(data)
        from toolkit.core.kernels_client import kernels_types  # deferred: heavy import

        Digest, DigestAlgorithm, Metadata = kernels_types("Digest", "DigestAlgorithm", "Metadata")

        digest = Digest.hash_variant(DigestAlgorithm.SHA256, str(stage))  # computed last
        meta["digest"] = {"algorithm": "sha256", "files": dict(sorted(digest.files.items()))}
        text = json.dumps(meta, indent=2) + "\n"
        try:
            Metadata.from_bytes(text.encode())
        except Exception as exc:
            raise BuildError(
                f"{v.name}: generated metadata.json is rejected by kernels: {exc}",
                "report this as a ggml-vendor bug",
            ) from None
        (stage / "metadata.json").write_text(text)
        os.chmod(stage, 0o755)
