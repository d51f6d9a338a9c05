"""The Hub card (README.md on `main`): rendered from the package's templates/<name>/card/README.md.j2 (else the
tool's, toolkit/data/card/) with the ops, the upstream pin and the variants being published."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jinja2

from toolkit import __version__
from toolkit.core.config import Config
from toolkit.core.lock import Lock
from toolkit.core.text import printable

TEMPLATE = Path("card") / "README.md.j2"


def public_functions(variant_dir: Path) -> list[str]:
    """`__all__` of the variant's __init__.py, read without importing it (kernel-builder's fill-card rule)."""
    init = variant_dir / "__init__.py"
    try:
        tree = ast.parse(init.read_text())
    except (OSError, SyntaxError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return [str(x) for x in ast.literal_eval(node.value) if x != "layers"]
            except ValueError:
                return []
    return []


def _template_dir(cfg: Config) -> Path:
    own = cfg.templates_dir / TEMPLATE
    if own.is_file():
        return cfg.templates_dir
    # A package without its own card template (e.g. one `ggml-vendor init` made) uses the one shipped with the tool.
    return Path(__file__).resolve().parents[1] / "data"


def render_card(
    cfg: Config, repo_id: str, variant_dirs: list[Path], lock: Lock | None, conformance: dict[str, str] | None = None
) -> str:
    variants = []
    for d in variant_dirs:
        meta = json.loads((d / "metadata.json").read_text())
        backend = meta.get("backend") or {}
        variants.append(
            {
                "name": d.name,
                "backend": backend.get("type", "?"),
                "archs": backend.get("archs") or [],
                "conformance": (conformance or {}).get(d.name, "not run (not verified by this publish)"),
            }
        )
    functions = next((f for f in (public_functions(d) for d in variant_dirs) if f), [])
    upstream = {"url": cfg.upstream, "commit": "(not synced)", "date": "", "subject": ""}
    patches: list[dict[str, str]] = []
    if lock is not None:
        # The subject is the upstream's text: its escape sequences are spelled out, never sent on.
        upstream = {"url": lock.upstream, "commit": lock.commit, "date": lock.date, "subject": printable(lock.subject)}
        from toolkit.sync import patch_descriptions

        described = patch_descriptions(cfg.vendor_dir)
        patches = [
            {"name": p.name, "sha256": p.sha256, "verdict": p.verdict, "description": described.get(p.name, "")}
            for p in lock.patches
        ]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_template_dir(cfg))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return env.get_template(TEMPLATE.as_posix()).render(
        name=cfg.name,
        module=cfg.module,
        repo_id=repo_id,
        version=cfg.version,
        license=cfg.license,
        ops=[op.name for op in cfg.ops],
        functions=functions,
        upstream=upstream,
        patches=patches,
        variants=sorted(variants, key=lambda v: v["name"]),
        tool_version=__version__,
    )
