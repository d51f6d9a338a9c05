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


LIBSTDCXX_COMPAT_CPP = "libstdcxx_compat.cpp"  # written beside it; compiled into stable-ABI variants only

# Compiled into every stable-ABI Linux variant (steps.py's _plan_libstdcxx_compat). torch's header-only stable API
# builds its error messages with std::[o]stringstream inline (STD_TORCH_CHECK, TORCH_ERROR_CODE_CHECK), so the
# binding instantiates members that a libstdc++ >= 9 declares as explicitly instantiated in the library: the split
# default constructors (GLIBCXX_3.4.26) and, from the CUDA units, std::__throw_bad_array_new_length
# (GLIBCXX_3.4.29). A per-torch variant finds them exported by its torch; a stable one may load into any torch >=
# its floor and must not rely on that, and manylinux_2_28's libstdc++ (GLIBCXX_3.4.25) lacks them. So the
# extension carries its own definitions, instantiated from the same headers: where the process's libstdc++ has
# them, either copy is the same code.
LIBSTDCXX_COMPAT = """\
// libstdcxx_compat.cpp, supplied by ggml-vendor build for stable-ABI variants: the libstdc++ members newer than
// manylinux_2_28's (GLIBCXX_3.4.25) that torch's header-only stable API instantiates, defined in the extension.
#include <new>
#include <sstream>
namespace std {
void __throw_bad_array_new_length() { throw bad_array_new_length(); }
template basic_ostringstream<char>::basic_ostringstream();
template basic_stringstream<char>::basic_stringstream();
}  // namespace std
"""
