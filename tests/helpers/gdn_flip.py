"""A deliberate silent change for tests: flip gated_delta_net's state indexing from [value][key] to
[key][value] in a kernel source without touching any declaration (what ggml itself did, the other way, on
2026-03-13). Works on ggml's kernel (the pins since b41cee5e) and on our miniature one."""

from __future__ import annotations

import re

_RULES = (
    (r"(\w+)\[col \* S_v \+ i\]", r"\1[i * S_v + col]"),  # ggml: state writes (final and snapshot slots)
    (r"\b(state_in_offset|state_offset) \+ col \* S_v;", r"\1 + col;"),  # row of the column -> column
    (r"= curr_state\[i\];", "= curr_state[i * S_v];"),  # ggml: state read
    (r"= s_in\[i\];", "= s_in[i * S_v];"),  # miniature: state read
    (r"\bs_out\[i\] = ", "s_out[i * S_v] = "),  # miniature: state write
)


def flip_state_indexing(source: str) -> str:
    """`source` with the state read and written [key][value]; ValueError when the kernel no longer has the
    lines this edit knows (the pin moved: update the rules)."""
    total = 0
    for pattern, repl in _RULES:
        source, n = re.subn(pattern, repl, source)
        total += n
    if total < 3:
        raise ValueError(f"state indexing not recognised (only {total} edits); update tests/helpers/gdn_flip.py")
    return source
