"""The include closure, pure: parsing of quoted includes, resolution order, errors naming file and line."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.helpers.fixture_repos import BASE_FILES, FA_CUDA, GDN_CUDA, METAL
from toolkit.core.errors import UpstreamError
from toolkit.core.package_table import Entry
from toolkit.sync.closure import compute_closure, include_candidates, quoted_includes


def reader(files: dict[str, str]) -> Callable[[str], bytes | None]:
    return lambda p: files[p].encode() if p in files else None


ENTRIES = [
    ("gated_delta_net", "cuda", Entry(("src/ggml-cuda/gated_delta_net.cu",))),
    (
        "gated_delta_net",
        "metal",
        Entry(("src/ggml-metal/kernels/gated_delta_net.metal", "src/ggml-metal/ggml-metal.metal")),
    ),
    ("flash_attn", "cuda", Entry(("src/ggml-cuda/fattn-vec.cuh",))),
    ("flash_attn", "metal", Entry(("src/ggml-metal/ggml-metal.metal",))),
]


def test_quoted_includes_skip_comments_and_system_headers() -> None:
    text = (
        '#include "a.h"\n  #  include   "b/c.h"  // trailing\n#include <sys.h>\n// #include "no1.h"\n'
        '/* #include "no2.h"\n#include "no3.h" */ #include "no4.h"\nint x; /* c */ #include "no5.h"\n'
        '#include_next "no6.h"\n#include "d.h" /* "no7.h" */\n'
    )
    # no4.h is a real directive: the comment before it (opened at the start of line 5) is whitespace to cpp
    assert quoted_includes(text) == [(1, "a.h"), (2, "b/c.h"), (6, "no4.h"), (9, "d.h")]


def test_candidates_relative_first_then_roots() -> None:
    assert include_candidates("src/ggml-cuda/x.cu", "common.cuh") == [
        "src/ggml-cuda/common.cuh",
        "include/common.cuh",
        "src/common.cuh",
        "src/ggml-metal/common.cuh",
    ]
    assert include_candidates("src/ggml-cuda/x.cu", "ggml-cuda/common.cuh")[2] == "src/ggml-cuda/common.cuh"
    assert include_candidates("src/a/b.h", "../c.h")[0] == "src/c.h"


def test_closure_follows_includes_across_folders() -> None:
    cl = compute_closure(ENTRIES, reader(BASE_FILES))
    gdn_cuda, fa_cuda = cl.for_op("gated_delta_net", "cuda"), cl.for_op("flash_attn", "cuda")
    gdn_metal = cl.for_op("gated_delta_net", "metal")
    assert gdn_cuda is not None and fa_cuda is not None and gdn_metal is not None
    assert set(gdn_cuda.files) == GDN_CUDA
    assert set(fa_cuda.files) == FA_CUDA
    assert set(gdn_metal.files) == METAL
    assert gdn_metal.entries == ("src/ggml-metal/ggml-metal.metal",)
    # fattn.cu / fattn-mma.cuh / the CPU backend are never reached; commented includes are not followed
    assert "src/ggml-cuda/fattn-mma.cuh" not in cl.files and "src/ggml-cpu/ops.cpp" not in cl.files
    assert cl.files == tuple(sorted(GDN_CUDA | FA_CUDA | METAL))  # ENTRIES above: no ssm_conv
    assert cl.reasons["src/ggml-cuda/gated_delta_net.cu"] == "entry of gated_delta_net/cuda"
    assert cl.reasons["include/ggml-backend.h"] == "included by src/ggml-cuda/common.cuh:4"
    assert cl.needed_by["src/ggml-common.h"] == (
        "flash_attn/cuda",
        "flash_attn/metal",
        "gated_delta_net/cuda",
        "gated_delta_net/metal",
    )
    # the entry comes first in each op's list
    assert fa_cuda.files[0] == "src/ggml-cuda/fattn-vec.cuh"


def test_first_existing_alternative_wins() -> None:
    files = dict(BASE_FILES)
    files["src/ggml-metal/kernels/gated_delta_net.metal"] = '#include "../ggml-metal-impl.h"\n'
    cl = compute_closure(ENTRIES, reader(files))
    gdn = cl.for_op("gated_delta_net", "metal")
    assert gdn is not None
    assert gdn.entries == ("src/ggml-metal/kernels/gated_delta_net.metal",)
    assert set(gdn.files) == {"src/ggml-metal/kernels/gated_delta_net.metal", "src/ggml-metal/ggml-metal-impl.h"}


def test_missing_include_names_file_and_line() -> None:
    files = dict(BASE_FILES)
    files["src/ggml-cuda/convert.cuh"] += '\n#include "nowhere.cuh"\n'
    with pytest.raises(UpstreamError) as exc:
        compute_closure(ENTRIES, reader(files), where="abc123")
    msg = exc.value.one_line()
    assert 'src/ggml-cuda/convert.cuh:5: #include "nowhere.cuh" not found at abc123' in msg
    assert "\n" not in msg


def test_optional_include_is_skipped_only_when_listed() -> None:
    files = dict(BASE_FILES)
    files["src/ggml-cuda/convert.cuh"] += '#include "optional-vendor.h"\n'
    with pytest.raises(UpstreamError):
        compute_closure(ENTRIES, reader(files))
    cl = compute_closure(ENTRIES, reader(files), optional=("optional-vendor.h",))
    assert "optional-vendor.h" not in " ".join(cl.files)


def test_include_escaping_the_tree_is_refused() -> None:
    files = dict(BASE_FILES)
    files["src/ggml-cuda/convert.cuh"] += '#include "../../../../etc/passwd"\n'
    with pytest.raises(UpstreamError, match="points outside the ggml tree"):
        compute_closure(ENTRIES, reader(files))


def test_missing_entry_lists_alternatives() -> None:
    files = {k: v for k, v in BASE_FILES.items() if k != "src/ggml-metal/ggml-metal.metal"}
    with pytest.raises(
        UpstreamError,
        match=r"entry file of gated_delta_net/metal not found .*kernels/gated_delta_net.metal, src/ggml-metal/ggml-metal.metal",
    ):
        compute_closure(ENTRIES, reader(files))


def test_non_source_suffixes_are_copied_but_not_scanned() -> None:
    files = {"src/a.cu": '#include "table.inc"\n', "src/table.inc": '#include "never-followed.h"\n'}
    cl = compute_closure([("op", "cuda", Entry(("src/a.cu",)))], reader(files))
    assert cl.files == ("src/a.cu", "src/table.inc")


def test_prefetch_is_offered_the_candidates() -> None:
    seen: list[list[str]] = []
    compute_closure(ENTRIES[:1], reader(BASE_FILES), prefetch=seen.append)
    assert any("src/ggml-cuda/common.cuh" in batch for batch in seen)
