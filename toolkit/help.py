"""Every command's help text, in one place (the option help of options shared by all commands is in app.py;
an option's own help stays beside it). docs/commands.md is the long form of the same, with every command's
options generated from the app (`python -m toolkit.docgen`)."""

from toolkit.core.errors import exit_code_summary

APP = (
    "Pin ggml's gated delta net and flash-attention kernels and ship them as Hugging Face Hub kernels.\n\n"
    "Pipeline: sync (upstream -> vendor/) -> render (templates/<name>/ -> build/<name>/src/) -> "
    "build (-> build/<name>/<variant>/) -> verify -> publish (-> the Hub).\n\n"
    "Every command takes --project/-C, --json and --verbose/-v; the ones that change something take --dry-run "
    "(print the plan, change nothing). A project may hold several packages from one pin "
    "(tables tool.ggml-vendor.packages.NAME, see `init`): per-package commands take --package/-p NAME (default: all).\n\n"
    f"Exit codes: 0 ok, {exit_code_summary()}; 1 anything else."
)

SYNC = """Pin an upstream ggml/llama.cpp revision into vendor/ and write the lock vendor/UPSTREAM.

Reads only the files the configured ops need (their entry files plus every quoted #include, followed
recursively, plus LICENSE) straight from git objects at REV, applies vendor/patches/*.patch in name order,
and swaps the new vendor/ in atomically. Re-syncing the same revision writes nothing. When the pin moves,
prints what changed upstream and writes build/reports/drift-<old>-<new>.{md,json}: per op, "signature
changed (breaking)" apart from "body changed: review semantics" (kernels and ggml-cpu's reference), with the
diff and the upstream commits that touched each function.

Holds the project lock from plan to report: a second ggml-vendor command waits (or, with --no-wait, refuses).

Without --rev, re-creates the locked pin (e.g. after a fresh clone, where only vendor/UPSTREAM is tracked).

\b
Examples:
  ggml-vendor sync --rev v0.21.0                                  # config's upstream (a URL: fetched shallow)
  ggml-vendor sync --rev master --mirror ~/src/ggml              # read objects from a local clone
  ggml-vendor sync --rev master --upstream embedded              # the bundled miniature, offline
  ggml-vendor sync --check                                       # vendor/ vs the lock, offline
"""

STATUS = """Show the pinned upstream (vendor/UPSTREAM), whether vendor/ matches it, and each patch's state.

Offline and read-only; exits 0 whatever the state (use `ggml-vendor sync --check` to fail on a dirty tree).
"""

RENDER = (
    "Render each package's templates/<name>/ into build/<name>/src/ (build.toml, torch-ext/, csrc/: generated, "
    "never committed; build and publish read them there). Same inputs give the same bytes; --check renders "
    "twice and fails naming any file whose bytes differ."
)

VARIANTS = (
    "List the build matrix (variants/*.toml): every variant name, the engine that builds it (local here, "
    "local after provisioning its torch/toolkit from PyPI, cross-built here, nix, or the GitHub Actions "
    "runner kind of `ggml-vendor ci`), and what this machine lacks for it (macOS + Metal toolchain, ROCm, "
    "an aarch64 host, torch X for CUDA Y from index Z)."
)

BUILD = (
    "Build build/<variant>/ (metadata.json, <id>.abi3.so, __init__.py, _ops.py) from the rendered project. "
    "Without options: the variant of this environment's torch + CUDA toolkit. --all: every variant of the "
    "matrix this host can build, after provisioning what the matrix's [sources] provide (torch builds, CUDA "
    "toolkits, the pinned zig; --no-provision opts out); the others are reported with the engine that builds "
    "them. Linux variants are compiled and linked by the hermetic zig toolchain (glibc 2.28 targets) when it "
    "is installed or provisioned (--toolchain system: the host's g++). Kernel objects that do not "
    "depend on torch are compiled once and shared by all torch versions; unchanged variants are cache hits. "
    "Exit codes: 0 ok, 7 a variant failed, 10 nothing buildable here, 130 interrupted."
)

VERIFY = """Check every build/<variant>/: layout and names (op namespace = .so stem = metadata id), metadata.json
through kernels' own parser and digest, backend.archs against the cubins/PTX inside the binary, ABI
(manylinux_2_28, abi3 >= 3.9, macOS minos), real binaries (no Git LFS stubs), the Metal library,
provenance against vendor/UPSTREAM, a clean vendor/, an import through kernels.get_local_kernel when
this machine can load the variant, and (where it loads and a GPU is present) conformance: every op against
the package's float64 reference of the documented contract on a fixed set of shapes. Exits 8 when anything
fails; publish requires a pass, and conformance wherever the publishing host could run it."""

PUBLISH = """Publish build/ variants: each to branch v<N> of a kernel-type repo (created if missing) with the card
(README.md: ops, upstream pin, variants) on main. Only files inside the re-uploaded variants are deleted;
commits go in batches guarded by parent_commit, and the result is re-listed and compared by size and
hash. Refused with nothing pushed when a variant is unverified (run `ggml-vendor verify`) or changed
since, dirty, of mixed versions, an LFS pointer stub, or when no token is set. `--dry-run` prints the
plan against the live tree. An interrupted publish re-runs to completion without duplicates."""

DEMO = """Run the whole pipeline offline on the miniature upstream bundled with the tool, in a throwaway copy of
this project: sync -> render -> build (what this machine can) -> verify -> publish to a local test Hub
-> kernels.get_kernel(repo, version=N) in a fresh process, which on a CUDA machine also runs both ops
against float64 references. Prints one table (or --json) and exits non-zero if any stage failed. Your
project, vendor/ and build/ are not touched. --dry-run prints the stages it would run."""

PATCH = """Keep changes to the vendored ggml as a patch series in vendor/patches/ (applied by sync, in name order).

Workflow: edit files under vendor/ggml, then `ggml-vendor patch save NAME -m "what and why"`; before moving
the pin, `ggml-vendor patch list --rev REV` says which patches still apply there.
"""

PATCH_SAVE = (
    "Save the current edits of vendor/ggml (against the pinned upstream with the patches before it applied) as "
    "vendor/patches/NNNN-NAME.patch in git format-patch form, or refresh the patch NAME if it exists; "
    "re-locks vendor/ in the same atomic step.\n\n"
    "Example: ggml-vendor patch save gdn-decode -m 'cuda: gated_delta_net: 16-byte state loads at decode'"
)

PATCH_LIST = (
    "List vendor/patches/*.patch with their descriptions and health: applies, already-upstream, or conflicts "
    "at hunk N. --rev REV checks them against another upstream revision without changing anything."
)

PATCH_DROP = "Remove a patch from vendor/patches/ and un-apply it from vendor/ggml."

CI = """Render .github/workflows/build-variants.yml from every package's variant matrix: one job per variant on a
runner that can build it (x86_64 and arm64 Linux, NVIDIA's CUDA image for toolkits PyPI lacks, a ROCm container,
macOS with Xcode's Metal toolchain), each building and verifying its variant and uploading the package's
build/<name>/<variant>/ with its verification record as an artifact named <package>-<variant>; then per package a job runs `ggml-vendor collect`, verifies and publishes to its Hub
repo (v* tags, or a manual run that asks for it). Also renders .github/workflows/update.yml, the weekly
keep-current workflow (outdated, then update, a build, the tests and one pull request). Same inputs give the same
bytes; --check exits 6 when a committed workflow is missing or stale."""

COLLECT = """Merge per-variant build artifacts into build/: what the `ggml-vendor ci` jobs upload (<variant>/ plus
its .verified.json record), as directories or .zip files, or a directory holding them (download-artifact's
layout). Refuses, naming it, an artifact that is incomplete (files missing or not matching its digest),
from another source tree (lock, build inputs or commit differ from this checkout), unverified, or that
fails verify's checks again on this host; build/ is then unchanged. Otherwise swaps the variants in
atomically (others in build/ are kept) and keeps each one's verification record. Exit 11 on a refusal."""

INIT = """Add a package to this project: one more Hub kernel from the same pin and the same vendor/.

Appends the table tool.ggml-vendor.packages.NAME to pyproject.toml (comments and layout kept) with its version,
hub-repo and ops, and creates templates/NAME/ (a skeleton: build.toml, the torch binding, the ggml runtime
shim, one CUDA unit per op including its upstream entry once, and facts.py for the ops' facts),
variants/NAME.toml (a copy of the selected package's matrix) and tests/packages/test_<module>.py. The new
config is validated before anything is written; --dry-run lists what would be written. Then: `ggml-vendor sync`
(vendors the union of every package's closure) and `ggml-vendor render -p NAME`.

Examples:
  ggml-vendor init gguf-kernels --op mul_mat_vec=src/ggml-cuda/mmvq.cu --dry-run
  ggml-vendor init gguf-kernels --op dequantize=cuda:src/ggml-cuda/convert.cu --hub-repo me/gguf-kernels
"""

OUTDATED = """Report what moved since the pin, changing nothing: exit 0 when everything is current, 12 when something moved.

Four sections, per package (--package/-p NAME for one):

\b
  upstream  commits since the pin on the pin's upstream (or --upstream / --mirror) that touch the package's
            closure, with dates and subjects, and the ops whose fingerprints move: "signature changed
            (breaking)" or "body changed: review semantics", as sync's drift report says;
  patches   each of vendor/patches/ at the head, by a dry three-way apply: applies, rebased, already upstream
            (its hunks are in upstream), or conflicts at a named hunk;
  torch     releases on the index newer than the matrix's newest torch, and the newest one's builds the
            matrix lacks, with the CUDA build each offers (its core metadata's CUDA runtime pin);
  clients   kernels and transformers releases past the ranges pyproject.toml declares.

The upstream is surveyed once for the family (one pin) and the index read once. The index is --index-url, else pip's (PIP_INDEX_URL, pip's configuration, else pip's default index). A URL
upstream's commits since the pin are fetched into the tool's cache (the project is never written). An
unreachable upstream is exit 3, an unreachable or unreadable index exit 13.

\b
Examples:
  ggml-vendor outdated                                  # every package, every section
  ggml-vendor outdated -p gguf-kernels --json           # one package, as JSON
  ggml-vendor outdated --mirror ~/src/ggml --skip torch # history from a local clone; no index for torch
"""

UPDATE = """Move the pin to the upstream's head (or --rev REV), carrying our patches by a three-way apply, and
report the move as Markdown: the pull request's body.

Plans everything before writing anything: the new vendor/ (sync's tree, with each patch kept as it is, rebased
by a three-way merge, or dropped when upstream already carries it), with --torch the new torch rows of each
package's matrix (from the index, as `outdated` lists them; tomlkit keeps the file's comments and layout),
then render (and the CI workflow when the matrix changed). A patch that conflicts stops the update naming the
patch and hunk (exit 5) with vendor/ unchanged; a --rev that is no commit is exit 3, nothing written.

The report (drift, patch health, variant changes, what to test) is written to build/reports/update-<old>-<new>.md
and, with --report-file PATH, to PATH too.

\b
Examples:
  ggml-vendor update --dry-run                          # what would move
  ggml-vendor update --latest --torch --report-file body.md
  ggml-vendor update --rev 4f1c2a9 --mirror ~/src/ggml
"""
