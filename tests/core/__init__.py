"""Tests of toolkit/core: config (and the package family), fs, the lock files, the kernels bindings."""
