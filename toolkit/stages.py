"""The stage registry: every stage package of the pipeline, typed by the one protocol.

As cibuildwheel's `ALL_PLATFORM_MODULES` holds each platform module as a `PlatformModule`, each entry here is
a module held as a `toolkit.core.stage.Stage[Request, Plan, Report]`: mypy checks that its `plan` takes the
project's Config and its own Request and returns its Plan, and that its `execute` takes that Plan and returns
its Report. A stage that drifts from the protocol fails the type check here, not at run time.

The CLI does not import this module (each command imports only its own stage, to start fast); the commands
hand their stage to `toolkit.app.stage_run`, which is typed by the same protocol. The demo is not a stage:
it drives these on a copy of the project. `status` and `variants` are queries (reads with no execute).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from toolkit import build, init, publish, render, sync, verify
from toolkit.ci import collect, workflow
from toolkit.core.stage import Stage
from toolkit.outdated import stage as outdated
from toolkit.outdated import update
from toolkit.sync import patch_stage

SYNC: Final[Stage[sync.Request, sync.Plan, sync.Report]] = sync
PATCH: Final[Stage[patch_stage.Request, patch_stage.Plan, patch_stage.Report]] = patch_stage
RENDER: Final[Stage[render.Request, render.Plan, render.Report]] = render
BUILD: Final[Stage[build.Request, build.Plan, build.Report]] = build
VERIFY: Final[Stage[verify.Request, verify.Plan, verify.Report]] = verify
PUBLISH: Final[Stage[publish.Request, publish.Plan, publish.Report]] = publish
CI: Final[Stage[workflow.Request, workflow.Plan, workflow.Report]] = workflow
COLLECT: Final[Stage[collect.Request, collect.Plan, collect.Report]] = collect
OUTDATED: Final[Stage[outdated.Request, outdated.Plan, outdated.Report]] = outdated
UPDATE: Final[Stage[update.Request, update.Plan, update.Report]] = update
INIT: Final[Stage[init.Request, init.InitPlan, init.InitReport]] = init

# Pipeline order first (sync -> render -> build -> verify -> publish), then the rest as the CLI lists them.
STAGES: Final[Mapping[str, Stage[Any, Any, Any]]] = {
    "sync": SYNC,
    "patch": PATCH,
    "render": RENDER,
    "build": BUILD,
    "verify": VERIFY,
    "publish": PUBLISH,
    "ci": CI,
    "collect": COLLECT,
    "outdated": OUTDATED,
    "update": UPDATE,
    "init": INIT,
}
