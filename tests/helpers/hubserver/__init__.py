"""Test support for verify/publish/demo: the local Hub server (it ships in toolkit.testing.localhub because
`ggml-vendor demo` starts it too) and tiny fixture variants compiled on the spot (variants.py)."""

from toolkit.testing.localhub import HubError, HubServer, HubState, git_blob_id

__all__ = ["HubServer", "HubState", "HubError", "git_blob_id"]
