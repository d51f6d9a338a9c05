"""Build executors and their plan: plan.py (pure), local.py (this host), nix.py (kernel-builder), cache.py,
envs.py (toolkits and torch environments), inputs.py (the rendered project), stage.py (end to end)."""
