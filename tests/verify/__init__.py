"""Tests of toolkit/verify (see tests/README.md for the layout)."""
