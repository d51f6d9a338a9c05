"""Tests of toolkit/sync (see tests/README.md for the layout)."""
