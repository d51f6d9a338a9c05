"""Text from outside (an upstream's commit subjects, file names, include names) made safe to show.

A hostile upstream or mirror can put terminal escape sequences in a commit subject: SGR colours, OSC 8
hyperlinks that show one address and open another, an OSC 0 window title, a carriage return that hides the
start of a line, bidirectional overrides that reorder what is read. `printable` spells every such character
out (`\\x1b`, `\\u202e`) so that what reaches a terminal or a report is exactly what is in the text.
"""

from __future__ import annotations

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), and Unicode's invisible
# direction and line controls.
_UNSAFE = (
    [c for c in range(0x20) if c not in (0x09, 0x0A)]
    + list(range(0x7F, 0xA0))
    + [0x061C, 0x200E, 0x200F, 0x2028, 0x2029]
    + list(range(0x202A, 0x202F))
    + list(range(0x2066, 0x206A))
)
_ESCAPES = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _UNSAFE}


def printable(text: str) -> str:
    """`text` with every control character spelled out as an escape; tabs and newlines are kept."""
    return text.translate(_ESCAPES)
