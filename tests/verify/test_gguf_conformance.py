"""gguf-kernels' conformance gate (templates/gguf-kernels/conformance.py, named by its facts' CONFORMANCE) on the
CPU: stand-in ops computed from gguf's numpy dequantization pass every case, each plausible wrong contract fails
its cases, an op that raises fails only its own, and without the `gguf` package the gate says why it did not run.
The gate on the real CUDA build runs in `ggml-vendor verify -p gguf-kernels` on a GPU host.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from toolkit.core import config
from toolkit.verify import conformance as conf
from toolkit.verify.findings import FAIL, PASS

REPO = Path(__file__).resolve().parents[2]
CASES = conf.load_cases(REPO / "templates" / "gguf-kernels" / "conformance.py")
R = CASES.R
NAMES = {v: k for k, v in R.TYPES.items()}


@pytest.fixture(scope="module")
def torch() -> ModuleType:
    pytest.importorskip("gguf", reason="needs ggml-org's gguf package (pip install gguf): the reference")
    torch: ModuleType = pytest.importorskip("torch", reason="torch is not installed")
    return torch


class NumpyOps:
    """The documented API on the CPU from gguf's numpy dequantization, with optional deliberate mistakes."""

    MAX_GEMV_ROWS = 8

    def __init__(self, torch: ModuleType, *, mistake: str = "") -> None:
        self.torch, self.mistake = torch, mistake

    def _w(self, blocks: Any, ggml_type: int, cols: int) -> Any:
        w = R.dequantize(NAMES[ggml_type], blocks.numpy(), cols)
        if self.mistake == "half-scale":
            w = w * 0.5
        return self.torch.from_numpy(w)

    def dequantize(self, blocks: Any, ggml_type: int, rows: int, cols: int, dtype: Any) -> Any:
        w = self._w(blocks, ggml_type, cols)
        return (w.T.contiguous().reshape(rows, cols) if self.mistake == "transposed" else w).to(dtype)

    def get_rows(self, blocks: Any, ids: Any, ggml_type: int, cols: int, dtype: Any) -> Any:
        w = self._w(blocks, ggml_type, cols)
        ids = ids.sort().values if self.mistake == "sorted-ids" else ids
        return w[ids].to(dtype)

    def mul_mat_vec(self, blocks: Any, x: Any, ggml_type: int, out_features: int) -> Any:
        w = self._w(blocks, ggml_type, x.shape[-1])
        y = x.float() @ w.T
        return (y + 0.05 * y.abs().max()) if self.mistake == "offset" else y

    def mul_mat_id(self, blocks: Any, x: Any, ids: Any, ggml_type: int, out_features: int) -> Any:
        e, n, bpr = blocks.shape
        w = self._w(blocks.reshape(e * n, bpr), ggml_type, x.shape[-1]).reshape(e, n, -1)
        if self.mistake == "first-expert":
            ids = self.torch.zeros_like(ids)
        return self.torch.einsum("tunk,tk->tun", w[ids], x.float())


def run_cases(torch: ModuleType, ops: NumpyOps) -> dict[str, Any]:
    return {
        "device": "cpu",
        "cases": [CASES.run_case(torch, ops, c, "cpu") for c in CASES.UNPACK_CASES + CASES.GEMV_CASES],
    }


def failed(doc: dict[str, Any]) -> set[str]:
    return {c["case"] for c in doc["cases"] if not c["ok"]}


def test_the_package_declares_its_cases() -> None:
    gguf = config.load(REPO).for_package("gguf-kernels")
    assert conf.cases_file_of(gguf) == REPO / "templates" / "gguf-kernels" / "conformance.py"
    ops = {("get_rows" if c.ids else "dequantize") for c in CASES.UNPACK_CASES} | {
        ("mul_mat_id" if c.experts else "mul_mat_vec") for c in CASES.GEMV_CASES
    }
    assert ops == {"dequantize", "get_rows", "mul_mat_vec", "mul_mat_id"}  # every op of the API
    types = {c.type for c in (*CASES.UNPACK_CASES, *CASES.GEMV_CASES)}
    assert {"Q4_0", "Q8_0", "Q4_K", "Q6_K"} <= types  # legacy, the Q4_K_M pair, and one codebook type
    assert any(c.M == 0 for c in CASES.GEMV_CASES)  # MAX_GEMV_ROWS rows
    assert any(c.N % 2 for c in CASES.GEMV_CASES)  # N no multiple of the rows per block


def test_faithful_ops_pass_every_case(torch: ModuleType) -> None:
    doc = run_cases(torch, NumpyOps(torch))
    assert failed(doc) == set(), [c for c in doc["cases"] if not c["ok"]]
    assert conf.summarise("v", doc).status == PASS


@pytest.mark.parametrize(
    "mistake,expected",
    [
        ("half-scale", {c.name for c in (*CASES.UNPACK_CASES, *CASES.GEMV_CASES)}),
        ("transposed", {c.name for c in CASES.UNPACK_CASES if not c.ids}),
        ("sorted-ids", {"get-rows-q8_0", "get-rows-q4_k"}),
        ("offset", {c.name for c in CASES.GEMV_CASES if not c.experts}),
        ("first-expert", {"mul-mat-id-q4_k"}),
    ],
)
def test_each_wrong_contract_fails_its_cases(torch: ModuleType, mistake: str, expected: set[str]) -> None:
    doc = run_cases(torch, NumpyOps(torch, mistake=mistake))
    assert failed(doc) == expected
    finding = conf.summarise("v", doc)
    assert finding.status == FAIL and "off the contract" in finding.message


def test_a_raising_op_fails_its_case_and_the_rest_still_run(torch: ModuleType) -> None:
    class Broken(NumpyOps):
        def get_rows(self, *a: Any, **kw: Any) -> Any:
            raise ValueError("ids: out of range")

    doc = run_cases(torch, Broken(torch))
    assert failed(doc) == {c.name for c in CASES.UNPACK_CASES if c.ids}
    assert "ids: out of range" in conf.summarise("v", doc).message


def test_without_gguf_the_gate_says_why(torch: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_gguf(name: str, *a: Any, **kw: Any) -> ModuleType:
        if name == "gguf":
            raise ImportError("No module named 'gguf'")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_gguf)
    doc = CASES.run_all(NumpyOps(torch))
    assert doc == {"skip": CASES.NO_GGUF}
    assert conf.summarise("v", doc).message == f"not run: {CASES.NO_GGUF}"
