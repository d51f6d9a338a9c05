"""The generated include dir (<build cache>/gen): the files the build supplies there — kernel-builder's
registration.h for a package whose render writes none, glibc_compat.c — and where a toolkit's cuBLAS headers
are copied. plan.py names them in command lines; local.py writes them."""

from __future__ import annotations

import hashlib

GLIBC_COMPAT_C = "glibc_compat.c"  # written into the generated include dir by the executor

# kernel-builder's registration.h (docs/hub-contract.md §4.3), supplied when a package's
# render does not write one (the first package's templates do; a later package's may not).
REGISTRATION_H = """\
// registration.h supplied by ggml-vendor build (same macros as kernel-builder's, from vLLM).
#pragma once
#include <Python.h>

#define _CONCAT(A, B) A##B
#define CONCAT(A, B) _CONCAT(A, B)
#define _STRINGIFY(A) #A
#define STRINGIFY(A) _STRINGIFY(A)

// Expand NAME first so that it can be the TORCH_EXTENSION_NAME macro.
#define TORCH_LIBRARY_EXPAND(NAME, MODULE) TORCH_LIBRARY(NAME, MODULE)
#define TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)

// An empty Python module named NAME (limited-API safe): the ops live in torch.ops.NAME.
#define REGISTER_EXTENSION(NAME)                                                   \\
  PyMODINIT_FUNC CONCAT(PyInit_, NAME)() {                                         \\
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, STRINGIFY(NAME),   \\
                                        nullptr, 0, nullptr};                      \\
    return PyModule_Create(&module);                                               \\
  }
"""

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
