"""The conformance gate (issue 11): the first package's cases (templates/conformance.py) against stand-in ops on
the CPU (a faithful one passes, each plausible wrong contract fails), the verdict it leaves in the verification
record, publish report and Hub card, and publish's refusal where the gate could have run. The real build failing
the gate once the vendored kernel's state indexing is flipped is tests/gpu/test_conformance.py's (it needs a CUDA
device).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers.hubserver import HubServer, HubState
from tests.helpers.hubserver.variants import NAME, make_variant, write_project
from toolkit.core import config
from toolkit.core.errors import PublishError
from toolkit.verify import VerifyOptions, verify_build
from toolkit.verify import conformance as conf
from toolkit.verify.findings import FAIL, PASS, SKIP
from toolkit.verify.runner import STAMP_NAME

REPO = Path(__file__).resolve().parents[2]
CASES = conf.load_cases(
    REPO / "templates" / "ggml-attn-kernels" / "conformance.py"
)  # the first package's cases (its facts name them)
R = CASES.R  # and their float64 references (templates/reference.py)


@pytest.fixture(scope="module")
def torch() -> ModuleType:
    torch: ModuleType = pytest.importorskip("torch", reason="torch is not installed: the references need it")
    return torch


class FaithfulOps:
    """The documented contract in float32 on the CPU, with optional deliberate mistakes."""

    def __init__(
        self,
        torch: ModuleType,
        *,
        state: str = "vk",
        gqa: str = "tiled",
        gate: str = "log",
        fa_gqa: str = "grouped",
        honour_scale: bool = True,
        conv: str = "faithful",
    ) -> None:
        self.torch, self.state, self.gqa, self.gate = torch, state, gqa, gate
        self.fa_gqa, self.honour_scale, self.conv = fa_gqa, honour_scale, conv

    def supports_ssm_conv(self, d_conv: int, channels: int) -> bool:
        return d_conv in (3, 4, 5, 9, 15) and channels % 128 == 0

    def ssm_conv_input(self, n_seqs: int, channels: int, length: int, device: Any) -> Any:
        return self.torch.empty(n_seqs, channels, length)

    def ssm_conv(self, x: Any, weight: Any, bias: Any = None, *, silu: bool = False) -> Any:
        flip = self.conv == "flipped"
        silu = silu and self.conv != "no-silu"
        return R.ssm_conv_reference(self.torch, x, weight, bias, silu=silu, flip=flip).float()

    def supports_gated_delta_net(self, d: int) -> bool:
        return d in (16, 32, 64, 128)

    def supports_flash_attn(self, n_q: int, dk: int, dv: int) -> bool:
        return 1 <= n_q <= 19 and dk == dv and dk in (64, 128, 256)

    def gated_delta_net(self, q: Any, k: Any, v: Any, g: Any, beta: Any, state: Any) -> tuple[Any, Any]:
        s = state.transpose(-1, -2) if self.state == "kv" else state
        out, final = R.gdn_reference(self.torch, q, k, v, g, beta, s, gqa=self.gqa, gate=self.gate)
        if self.state == "kv":
            final = final.transpose(-1, -2)
        return out.float(), final.float().contiguous()

    def flash_attn(self, q: Any, k: Any, v: Any, mask: Any = None, scale: float | None = None) -> Any:
        import math

        if scale is None or not self.honour_scale:
            scale = 1 / math.sqrt(q.shape[-1])
        return R.fa_reference(self.torch, q, k.float(), v.float(), mask, scale, gqa=self.fa_gqa).float()


def run_cases(torch: ModuleType, ops: FaithfulOps) -> dict[str, Any]:
    return {
        "device": "cpu",
        "cases": [CASES.run_case(torch, ops, c, "cpu") for c in (*CASES.GDN_CASES, *CASES.FA_CASES, *CASES.CONV_CASES)],
    }


def failed(doc: dict[str, Any]) -> set[str]:
    return {c["case"] for c in doc["cases"] if not c["ok"]}


def test_the_cases_cover_the_documented_contract() -> None:
    every = (*CASES.GDN_CASES, *CASES.FA_CASES, *CASES.CONV_CASES)
    covered = " ".join(c.covers for c in every)
    for part in ("[value][key]", "tiled", "KDA", "log-domain", "1/sqrt", "mask", "multiple of 256", "scale"):
        assert part in covered, part
    for part in ("one token", "SiLU", "long kernel", "bias", "no activation"):  # ssm_conv
        assert part in covered, part
    contrasts = {w for c in every for w in c.contrast}
    assert {
        "state-kv",
        "grouped",
        "linear-gate",
        "unscaled",
        "tiled",
        "default-scale",
        "flipped",
        "no-silu",
    } <= contrasts


def test_faithful_ops_pass_every_case(torch: ModuleType) -> None:
    doc = run_cases(torch, FaithfulOps(torch))
    assert failed(doc) == set(), [c for c in doc["cases"] if not c["ok"]]
    assert conf.summarise("v", doc).status == PASS


@pytest.mark.parametrize(
    "mistake,expected",
    [
        ({"state": "kv"}, {"gdn-decode", "gdn-tokens", "gdn-kda"}),
        ({"gqa": "grouped"}, {"gdn-tiled-gqa"}),
        ({"gate": "linear"}, {"gdn-log-gates"}),
        ({"fa_gqa": "tiled"}, {"fa-grouped-gqa"}),
        ({"honour_scale": False}, {"fa-scale-bf16"}),
        ({"conv": "flipped"}, {"conv-decode", "conv-prefill", "conv-k3-linear"}),
        ({"conv": "no-silu"}, {"conv-prefill"}),
    ],
)
def test_each_wrong_contract_fails_its_cases(
    torch: ModuleType, mistake: dict[str, str] | dict[str, bool], expected: set[str]
) -> None:
    doc = run_cases(torch, FaithfulOps(torch, **mistake))
    assert expected <= failed(doc)
    finding = conf.summarise("v", doc)
    assert finding.status == FAIL and "off the contract" in finding.message
    assert "drift report" in finding.remedy


def test_a_raising_op_fails_its_case_and_the_rest_still_run(torch: ModuleType) -> None:
    class Broken(FaithfulOps):
        def flash_attn(self, *a: Any, **kw: Any) -> Any:
            raise RuntimeError("kernel launch failed")

    doc = run_cases(torch, Broken(torch))
    assert failed(doc) == {c.name for c in CASES.FA_CASES}
    assert "kernel launch failed" in conf.summarise("v", doc).message


def test_not_run_says_why_in_record_report_and_card(tmp_path: Path) -> None:
    root = write_project(tmp_path / "proj", hub_repo="someone/kern")
    cfg = config.load(root)
    make_variant(root / "build" / NAME)
    report = verify_build(cfg, options=VerifyOptions(check_vendor=False))
    assert report.ok
    finding = next(f for v in report.variants for f in v.findings if f.check == "conformance")
    assert finding.status == SKIP and finding.message.startswith("not run: ")
    stamp = json.loads((root / "build" / NAME / STAMP_NAME).read_text())
    status = next(iter(stamp["variants"].values()))["conformance"]
    assert status.startswith("not run (") and status.endswith(")")

    from toolkit import publish

    with HubServer(HubState(tokens=("tok",))) as hub:
        if conf.runnable_here(next(iter(stamp["variants"])))[0]:
            pytest.skip("this host can run the gate, so publish would (rightly) refuse a not-run variant")
        request = publish.Request(endpoint=hub.url, token="tok", check_vendor=False)
        result = publish.execute(publish.plan(cfg, request))
    doc = json.loads(Path(result.report_path).read_text())
    assert doc["conformance"] == {next(iter(stamp["variants"])): status}
    assert f"conformance: {status}" in result.plan.card_text


def test_publish_refuses_where_the_gate_could_have_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_project(tmp_path / "proj", hub_repo="someone/kern")
    cfg = config.load(root)
    make_variant(root / "build" / NAME)
    assert verify_build(cfg, options=VerifyOptions(check_vendor=False, conformance=False)).ok
    from toolkit.publish import preflight as publish_preflight
    from toolkit.publish.preflight import preflight

    # publish asks verify's face whether the gate could run here (the name it imported from toolkit.verify)
    monkeypatch.setattr(publish_preflight, "runnable_here", lambda variant: (True, ""))

    with pytest.raises(PublishError, match="conformance not run .* this host can run it"):
        preflight(cfg, None, check_vendor=False)


def test_a_package_without_cases_is_not_run_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where the gate could run (a GPU host that loads the variant), a package whose facts name no cases module
    # gets SKIP naming that, not a pass.
    monkeypatch.setattr(conf, "runnable_here", lambda variant: (True, ""))
    [finding] = conf.conformance_check("v", tmp_path, cases_file=None)
    assert finding.status == SKIP and finding.message == f"not run: {conf.NO_CASES}"
    assert conf.status_of([finding]) == f"not run ({conf.NO_CASES})"
