"""`ggml-vendor verify`: prove each build/<variant>/ is what kernels.get_kernel will load, before it ships."""

from toolkit.verify.findings import FAIL, PASS, SKIP, WARN, Finding, VariantReport, VerifyReport
from toolkit.verify.runner import (
    STAMP_NAME,
    VerifyOptions,
    discover,
    stamp_verdict,
    tree_sha256,
    verify_build,
    verify_variant,
)

__all__ = [
    "Finding",
    "VariantReport",
    "VerifyReport",
    "VerifyOptions",
    "verify_build",
    "verify_variant",
    "discover",
    "stamp_verdict",
    "tree_sha256",
    "STAMP_NAME",
    "PASS",
    "FAIL",
    "WARN",
    "SKIP",
]
