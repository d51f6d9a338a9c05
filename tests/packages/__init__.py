"""CPU tests of the kernel packages' own code (templates/: bindings, layers, gguf-kernels, their Metal sources)."""
