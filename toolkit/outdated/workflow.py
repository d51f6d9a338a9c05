"""`.github/workflows/update.yml`, rendered by `ggml-vendor ci` beside the build workflow: weekly (and on demand)
it runs `ggml-vendor outdated`; when something moved, `ggml-vendor update --latest --torch`, a build of each
package's newest PyPI-torch variant on the CPU runner, the tests, and one pull request (created, or edited when
it exists) whose body is update's report followed by outdated's. The build workflow's conformance gate then runs
on the pull request's branch.

Rendered from templates/ci/update.yml.j2 with the build workflow's jinja environment (`<< >>` / `<% %>`, so
GitHub's `${{ }}` passes through). Pure: the bytes depend on the project config, the matrices and the template.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2

from toolkit.build.engines import Row, row_for
from toolkit.build.matrix import load_matrix
from toolkit.core.config import Config
from toolkit.core.errors import RenderError
from toolkit.render.stage import RenderedFile

TEMPLATE = "ci/update.yml.j2"
OUTPUT = ".github/workflows/update.yml"
BRANCH = "ggml-vendor/update"
# outdated's exit code when something moved (toolkit.core.errors.Outdated), which the workflow tests for.
MOVED_EXIT = 12


def cpu_build(cfg: Config) -> Row | None:
    """The variant of `cfg` the CPU runner builds: x86_64 Linux, torch and toolkit from PyPI, the newest torch."""
    matrix = load_matrix(cfg.variants_file)
    rows = [row_for(v, matrix) for v in matrix.variants if v.backend in cfg.backends]
    fit = [r for r in rows if r.group == "linux" and r.torch and "x86_64" in r.variant]
    return max(fit, key=lambda r: (r.variant.split("-")[0], r.variant)) if fit else None


def render_update(
    cfg: Config, environment: Callable[[Path], jinja2.Environment], marker: str, python: str
) -> RenderedFile | None:
    """update.yml for the project, rendered with the build workflow's `environment`, `marker` and `python` (so the
    two generated workflows stay alike), from the tool's template (toolkit/data/ci/)."""
    views = cfg.selected()
    templates = Path(__file__).resolve().parents[1] / "data"
    builds: list[dict[str, Any]] = []
    for view in views:
        row = cpu_build(view)
        if row is not None:
            builds.append({"package": view.name, "variant": row.variant, "torch": row.torch})
    context = {
        "notice": f"{marker} from the tool's {TEMPLATE} and the matrices. Do not edit: change the matrices and "
        "re-run `ggml-vendor ci`.",
        "python": python,
        "branch": BRANCH,
        "moved_exit": MOVED_EXIT,
        "builds": builds,
    }
    try:
        text = environment(templates).get_template(TEMPLATE).render(**context)
    except jinja2.TemplateError as exc:
        raise RenderError(
            f"toolkit/data/{TEMPLATE}:{getattr(exc, 'lineno', '?')} failed to render: {exc}", "fix the template"
        ) from None
    return RenderedFile(OUTPUT, TEMPLATE, text)


__all__ = ["BRANCH", "OUTPUT", "TEMPLATE", "cpu_build", "render_update"]
