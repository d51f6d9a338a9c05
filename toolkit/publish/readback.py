"""What a publish left on the remote when Ctrl-C cut it short, read back from the remote itself.

A Ctrl-C can land before the first commit, between two batches, or after the last one while the report is
printed; only the remote knows which. `interrupted(plan)` re-lists each branch the plan pushes to and says
truthfully whether it holds this publish, part of it, or nothing of it (`state_line`, pure).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from toolkit.core.errors import Interrupted, VendorError
from toolkit.core.interrupts import no_interrupt
from toolkit.publish.diff import DELETE, UNCHANGED, BranchPlan, PublishPlan, RemoteFile, same_content
from toolkit.publish.stage import Plan

Trees = dict[str, "dict[str, RemoteFile] | None"]  # branch -> its files (None: the branch does not exist)


def _applied(bp: BranchPlan, files: PublishPlan, tree: dict[str, RemoteFile] | None) -> tuple[int, bool]:
    """(how many of the branch's planned changes `tree` shows, whether it holds the whole plan: every change
    made and every file the plan keeps still there)."""
    if tree is None:
        return 0, False
    made, kept = 0, True
    for a in bp.actions:
        r = tree.get(a.path)
        if a.action == DELETE:
            made += r is None
            continue
        same = r is not None and same_content(files.local[a.path], r)
        if a.action == UNCHANGED:
            kept = kept and same
        else:
            made += same
    return made, kept and made == len(bp.changes)


def state_line(plan: Plan, trees: Trees) -> Interrupted:
    """The one line for what the remote holds now (each branch's tree as just read back)."""
    done, untouched, partial = [], [], []
    for bp in plan.files.branches:
        made, whole = _applied(bp, plan.files, trees.get(bp.branch))
        if whole:
            done.append(bp.branch)
        elif made == 0:
            untouched.append(bp.branch)
        else:
            partial.append(bp.branch)
    where = plan.target
    if plan.request.create_pr and not done and not partial:
        return Interrupted(
            f"the branches on {where} are as the plan read them (read back); --create-pr pushes to pull requests",
            "see the repository's pull requests for any this publish opened; re-run to open the rest",
        )
    if not untouched and not partial:
        return Interrupted(
            f"{where} holds this publish ({', '.join(done)} read back, every file as in build/): it had completed",
            "nothing to undo; re-run ggml-vendor publish for its report (it finds nothing left to push)",
        )
    if not done and not partial:
        return Interrupted(
            f"nothing was pushed: {', '.join(untouched)} on {where} hold none of this publish (read back)",
            "run ggml-vendor publish again",
        )
    parts = [f"{', '.join(done)} complete"] if done else []
    parts += [f"{', '.join(partial)} partly pushed"] if partial else []
    parts += [f"{', '.join(untouched)} not yet pushed"] if untouched else []
    return Interrupted(
        f"{where} holds part of this publish ({'; '.join(parts)}, read back)",
        "re-run ggml-vendor publish: it resumes from the live tree and pushes only what is missing",
    )


def _read_hub(plan: Plan) -> Trees:
    from toolkit.publish.hub import _api, _live_trees, _talking_to_hub, _token_if_any

    token = _token_if_any(plan.request.token)
    branches = [bp.branch for bp in plan.files.branches]
    with _talking_to_hub(plan.endpoint, plan.files.repo_id, token):
        return _live_trees(_api(plan.endpoint, token), plan.files.repo_id, branches)


def _read_git(plan: Plan) -> Trees:
    from toolkit.publish.git import _fetched, _remote_tree

    with tempfile.TemporaryDirectory(prefix="ggml-vendor-git-") as tmp:
        git = _fetched(Path(tmp) / "work", plan.target, lambda _msg: None)
        return {bp.branch: _remote_tree(git, f"origin/{bp.branch}") for bp in plan.files.branches}


def interrupted(plan: Plan) -> Interrupted:
    """The Interrupted error (exit 130) for a Ctrl-C anywhere after `plan` was made, the report's printing
    included: what the remote holds, read back from it."""
    with no_interrupt():
        try:
            trees = (_read_git if plan.transport == "git" else _read_hub)(plan)
        except (VendorError, OSError, ValueError) as exc:
            return Interrupted(
                f"interrupted, and {plan.target} could not be read back ({exc})",
                "run ggml-vendor publish --dry-run: it lists what the remote holds and what is left to push",
            )
    return state_line(plan, trees)
