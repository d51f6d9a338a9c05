"""Tests of toolkit/build (see tests/README.md for the layout)."""
