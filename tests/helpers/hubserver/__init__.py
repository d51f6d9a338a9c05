"""Test support for verify/publish/demo: the local Hub server (it ships in toolkit.testing.localhub because
`ggml-vendor demo` starts it too) and tiny fixture variants compiled on the spot (variants.py)."""

from toolkit.core.hashing import git_blob_id
from toolkit.testing.localhub import HubError, HubServer, HubState

__all__ = ["HubServer", "HubState", "HubError", "git_blob_id"]
