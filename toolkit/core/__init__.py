"""Shared pieces every stage uses: configuration, the lock, facts about ggml, errors, terminal output, hashing."""
