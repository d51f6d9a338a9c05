"""What every Report of the sync stages (sync, patch save/list/drop, status) shares: it exists only on success."""

from __future__ import annotations

from toolkit.core.stage import Verdict


class Succeeded(Verdict):
    """A Report mixin for the stages that raise every refusal as a VendorError before a Report is made: a
    Report that exists stands for a success, so `ok` is always true and `exit_code` 0 (the protocol's
    fields, for the CLI). A dirty vendor/ in `status` is a finding to print, not a failure."""

    def failure(self) -> None:
        return None
