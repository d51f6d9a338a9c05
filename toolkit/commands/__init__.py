"""CLI commands: thin wrappers that load config, call a stage's plan/execute, and report."""
