"""Checks of the repository itself: code size, links between documents, the benchmark scripts' own logic."""
