"""The license inventory the lock records: SPDX ids and copyright notices found in the vendored files."""

from __future__ import annotations

import re
from collections.abc import Mapping

from toolkit.core import ggml_facts
from toolkit.core.lock import LicenseInfo, notice_text

_SPDX_RE = re.compile(r"SPDX-License-Identifier:\s*([^\s*]+(?:\s+(?:OR|AND|WITH)\s+[^\s*]+)*)")
_COPYRIGHT_RE = re.compile(r"(?im)^[^\n]*\bcopyright\s+(?:\(c\)|©)?\s*\d{4}[^\n]*$")


def license_inventory(files: Mapping[str, bytes]) -> tuple[LicenseInfo, ...]:
    """SPDX ids (tags, or license texts ggml_facts recognises) and copyright lines found per file; files
    with neither are left out."""
    out = []
    for path in sorted(files):
        text = files[path].decode("utf-8", "replace")
        spdx = list(dict.fromkeys(m.group(1) for m in _SPDX_RE.finditer(text)))
        spdx += [sid for sid, marker in ggml_facts.LICENSE_TEXT_MARKERS if marker in text and sid not in spdx]
        found = {
            notice_text(m.group(0)): text.count("\n", 0, m.start()) + 1
            for m in reversed(list(_COPYRIGHT_RE.finditer(text)))
        }  # reversed: a notice repeated keeps its first line
        notices = sorted(found, key=found.__getitem__)
        if spdx or notices:
            out.append(LicenseInfo(path, tuple(spdx), tuple(notices), tuple(found[n] for n in notices)))
    return tuple(out)
