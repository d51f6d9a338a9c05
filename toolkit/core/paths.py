"""Where ggml-vendor keeps what it fetches and installs outside a project: one user cache root."""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "ggml-vendor"
# Moves the upstream caches (clones, the embedded miniature) elsewhere, e.g. to a test's temporary directory.
CACHE_ENV = "GGML_VENDOR_CACHE"


def user_cache_dir() -> Path:
    """The user's cache directory for ggml-vendor (platformdirs: ~/.cache/ggml-vendor on Linux); installed
    toolchains and torch environments live under it unless their own variable moves them."""
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME))


def cache_root() -> Path:
    """The root of the upstream caches: $GGML_VENDOR_CACHE, else the user cache directory."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else user_cache_dir()
