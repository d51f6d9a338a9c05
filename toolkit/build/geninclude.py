"""The generated include dir (<build cache>/gen): the file the build supplies there — glibc_compat.c — and where
a toolkit's cuBLAS headers are copied (registration.h is rendered into every package's source tree). plan.py names them in command lines; local.py writes them."""

from __future__ import annotations

import hashlib

GLIBC_COMPAT_C = "glibc_compat.c"  # written into the generated include dir by the executor

# Compiled into every Linux variant (plan.py's _plan_glibc_compat): keeps __libc_single_threaded@GLIBC_2.32
# out of the extension's imports.
GLIBC_COMPAT = """\
/* glibc_compat.c, supplied by ggml-vendor build. libstdc++ >= 11 reads __libc_single_threaded (glibc >= 2.32)
   to skip atomics in single-threaded processes; manylinux_2_28 promises glibc 2.28. This hidden local copy,
   fixed at 0 ("may be multi-threaded"), satisfies those references inside the extension: atomics are always
   used, which is correct everywhere, and the .so imports no glibc symbol newer than 2.28 for it. */
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
"""


def cublas_dir(gen_include: str, source: str) -> str:
    """Where the executor puts the cublas*.h copied from `source` (one dir per source)."""
    return f"{gen_include}/cublas-{hashlib.sha256(source.encode()).hexdigest()[:12]}"
