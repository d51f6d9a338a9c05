"""Every CUDA translation unit is compiled from one fixed path, wherever the project lies.

nvcc names anonymous namespaces (and, with -rdc, static kernels) after a hash of the translation unit's real
path (`_ZN44_GLOBAL__N__59a674c4_11_gdn…`; nvcc passes cudafe++ the resolved absolute path, so neither the
working directory nor a symlink changes it): the same tree built in two directories gives two different .so
files, and no -ffile-prefix-map reaches those names. So nvcc is handed a one-line stand-in at a fixed path
instead, `/tmp/ggml-vendor-<uid>/tu/<project-relative path>`, which includes the real source named on the
command line (-DGGML_VENDOR_TU="…"). Quoted includes still resolve beside the real source (it is the includer),
the depfile still names it, and the stand-in's bytes are the same for every source: builds running at once,
of one project or of two, never rewrite one under another.

The fixed path is /tmp's, not $TMPDIR's: a TMPDIR set per job or per session would rename every translation
unit. It is per user (the uid is in it) because what it holds is compiled: a directory another user made or
can write to is refused. The path joins the compile steps' cache keys (key_tag), so an object is reused only
where a clean compile would give the same bytes.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path, PurePosixPath

from toolkit.core import fs
from toolkit.core.errors import BuildError

MACRO = "GGML_VENDOR_TU"
STAND_IN = f"#include {MACRO}\n".encode()
FIXED_BASE = Path("/tmp")  # POSIX's; the temp dir Python finds only where it is missing or read-only


def stand_in_root() -> Path:
    """The fixed directory (per user: its name carries the uid) the stand-ins live in."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    base = FIXED_BASE if FIXED_BASE.is_dir() and os.access(FIXED_BASE, os.W_OK | os.X_OK) else None
    return (base or Path(tempfile.gettempdir())) / f"ggml-vendor-{uid}" / "tu"


def key_tag() -> str:
    """What joins the cache key of every compile that goes through a stand-in: the stand-in's directory
    names the anonymous namespaces (objects from before the fixed path, or from another one, are not reused)."""
    return f"tu=fixed-path-v2:{stand_in_root()}"


def _own_private_dir(path: Path) -> None:
    """Create `path` (and its parent) for this user only; refuse one another user made or can write to:
    what it holds is compiled."""
    for d in (path.parent, path):
        d.mkdir(mode=0o700, exist_ok=True)
        st = d.lstat()
        mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
        if not stat.S_ISDIR(st.st_mode) or not mine or st.st_mode & 0o022:
            raise BuildError(
                f"{d} (where CUDA sources are compiled from) is not a private directory of this user",
                f"remove it (rm -r {d}) and build again",
            )


def _relative_source(src: str, root: Path) -> str | None:
    """`src` as a clean path inside the project (None: absolute, escaping or not quotable in an #include)."""
    p = PurePosixPath(src)
    if p.is_absolute():
        try:
            p = PurePosixPath(Path(src).relative_to(root).as_posix())
        except ValueError:
            return None
    parts = p.parts
    if not parts or any(part in ("..", ".") for part in parts) or any(c in src for c in '"\n\\'):
        return None
    return p.as_posix()


def through_stand_in(argv: list[str], root: Path) -> list[str]:
    """nvcc's `argv` (`nvcc … -c SRC …`, SRC relative to `root`) compiling SRC through its stand-in at the
    fixed path; `argv` unchanged when SRC cannot be named that way (outside the project, odd characters)."""
    try:
        i = argv.index("-c") + 1
    except ValueError:
        return argv
    rel = _relative_source(argv[i], root) if i < len(argv) else None
    if rel is None or '"' in str(root / rel) or "\n" in str(root / rel):
        return argv
    real = root / rel
    base = stand_in_root()
    _own_private_dir(base)
    stand_in = base / rel
    stand_in.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        current = stand_in.read_bytes()
    except OSError:
        current = None
    if current != STAND_IN:
        fs.atomic_write(stand_in, STAND_IN)
    return [*argv[:i], str(stand_in), *argv[i + 1 :], f'-D{MACRO}="{real}"']
