"""glibc functions a manylinux_2_28 system (glibc 2.28) does not have, with the release that added them.

Used for *unversioned* imports: an object linked by a linker that dropped the symbol version (or against a
libc without it) still needs the function at run time, and on glibc 2.28 the load fails with "undefined
symbol". Versioned imports need no table: their version (`GLIBC_2.34`) says it all.

2.29-2.36: every symbol whose oldest version in glibc 2.36's libc, libm, libpthread, libdl, librt, libutil,
libresolv and libanl (x86_64) is newer than GLIBC_2.28, read from `.gnu.version_d` with
toolkit.verify.objfile. 2.37 and later: the additions of those releases' NEWS files that C/C++ code meets
through the headers (C23 redirects, strlcpy, pidfd_spawn, <stdbit.h>), plus whole prefixes below.
"""

from __future__ import annotations

_BY_RELEASE = {
    "2.29": "getcpu posix_spawn_file_actions_addchdir_np posix_spawn_file_actions_addfchdir_np",
    "2.30": "getdents64 gettid pthread_cond_clockwait pthread_mutex_clocklock pthread_rwlock_clockrdlock "
    "pthread_rwlock_clockwrlock sem_clockwait tgkill twalk_r",
    "2.31": "pthread_clockjoin_np",
    "2.32": "__libc_single_threaded pthread_attr_getsigmask_np pthread_attr_setsigmask_np sigabbrev_np "
    "sigdescr_np strerrordesc_np strerrorname_np",
    "2.33": "fstat fstat64 fstatat fstatat64 lstat lstat64 mallinfo2 mknod mknodat stat stat64",
    "2.34": "_Fork close_range closefrom dn_comp dn_expand dn_skipname execveat "
    "posix_spawn_file_actions_addclosefrom_np res_dnok res_hnok res_mailok res_mkquery res_nmkquery "
    "res_nquery res_nquerydomain res_nsearch res_nsend res_ownok res_query res_querydomain res_search "
    "res_send timespec_getres",
    "2.35": "__memcmpeq _dl_find_object epoll_pwait2 posix_spawn_file_actions_addtcsetpgrp_np dfmal dsqrtl "
    "ffma ffmal fsqrt fsqrtl fmaximum fmaximumf fmaximuml fmaximum_mag fmaximum_magf fmaximum_magl "
    "fmaximum_mag_num fmaximum_mag_numf fmaximum_mag_numl fmaximum_num fmaximum_numf fmaximum_numl fminimum "
    "fminimumf fminimuml fminimum_mag fminimum_magf fminimum_magl fminimum_mag_num fminimum_mag_numf "
    "fminimum_mag_numl fminimum_num fminimum_numf fminimum_numl",
    "2.36": "arc4random arc4random_buf arc4random_uniform c8rtomb mbrtoc8 fsconfig fsmount fsopen fspick "
    "mount_setattr move_mount open_tree pidfd_getfd pidfd_open pidfd_send_signal process_madvise process_mrelease",
    "2.38": "strlcpy strlcat wcslcpy wcslcat",
    "2.39": "pidfd_spawn pidfd_spawnp pidfd_getpid posix_spawnattr_getcgroup_np posix_spawnattr_setcgroup_np",
}

# Families added as a whole: C23's strtol/scanf redirects that _GNU_SOURCE (always on in C++) selects on a
# glibc >= 2.38 host, and the <stdbit.h> functions; the fmaximum/fminimum _Float variants (f32, f64x, ...).
_PREFIXES = (("__isoc23_", "2.38"), ("stdc_", "2.39"), ("fmaximum", "2.35"), ("fminimum", "2.35"))

NEWER_THAN_2_28: dict[str, str] = {name: release for release, names in _BY_RELEASE.items() for name in names.split()}


def added_after_2_28(name: str) -> str | None:
    """The glibc release that added `name`, when that is newer than 2.28; else None."""
    if name in NEWER_THAN_2_28:
        return NEWER_THAN_2_28[name]
    return next((release for prefix, release in _PREFIXES if name.startswith(prefix)), None)
