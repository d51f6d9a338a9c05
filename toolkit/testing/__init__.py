"""Test doubles that ship with the tool because `ggml-vendor demo` uses them too (the local Hub); no stage
imports this package."""
