"""ggml-vendor's tests, one package per part of toolkit/ (tests/README.md: layout, naming, markers)."""
