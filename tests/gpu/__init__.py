"""Tests that need a CUDA device (marker gpu; skipped, saying why, elsewhere)."""
