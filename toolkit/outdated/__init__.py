"""`ggml-vendor outdated` and `ggml-vendor update`: keeping the vendored kernels current.

outdated (stage.py)   read only: upstream commits since the pin per package closure with the ops whose
                      fingerprints or bodies change, the patch series at the head (three-way), torch releases past
                      the matrix, kernels/transformers releases past the declared ranges
update (update.py)    the move itself: sync to the new pin with the series rebased (rebase.py), new torch rows
                      in the matrix (tomlkit), render, and a Markdown report that is the pull request's body

The pieces: index.py (a PEP 503/691 simple-index client), releases.py (what the index offers against the matrix
and pyproject's ranges), survey.py (the upstream between the pin and a commit), where.py (opening the upstream).
"""

from toolkit.outdated.stage import Plan, Report, Request, execute, plan

__all__ = ["Plan", "Report", "Request", "execute", "plan"]
