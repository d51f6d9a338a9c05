"""Tests of toolkit/ci (see tests/README.md for the layout)."""
