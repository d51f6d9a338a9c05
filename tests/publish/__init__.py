"""Tests of toolkit/publish (see tests/README.md for the layout)."""
