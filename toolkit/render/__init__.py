"""The render stage: vendor/ + templates/ -> build.toml, torch-ext/, csrc/. stage.py is the entry point."""
