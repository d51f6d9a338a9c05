"""The build fan-out: `ggml-vendor ci` renders a GitHub Actions workflow from the variant matrix (workflow.py),
and `ggml-vendor collect` merges the per-variant artifacts its jobs upload into build/ (collect.py)."""
