"""Tests of toolkit/render (see tests/README.md for the layout)."""
