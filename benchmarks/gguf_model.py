"""A small random Qwen3.5-shaped (arch `qwen35`) GGUF file, written with ggml-org's `gguf` package: no download.

Tensor names come from `gguf.constants.MODEL_TENSORS[QWEN35]`, metadata keys from the ones transformers' GGUF
config mapping reads (`_qwen35_config` in transformers.integrations.gguf.gguf_config_mapping). The tensors are
random, stored the way llama.cpp's converter stores them (zero-centred norms as `w + 1`, `ssm_a` as
`-exp(A_log)`, conv1d squeezed to 2-D), so transformers' conversion turns them into a valid Qwen3_5ForCausalLM.
Weights are quantized with `gguf.quants.quantize` (Q8_0, Q4_0, Q4_1) or written as K-quant blocks (Q4_K, Q6_K:
random codes with fp16 scales chosen so every block's largest |w| is about 4 standard deviations of the
intended weights), since `gguf` cannot quantize K-quants.

Used by tests/gpu/test_gguf_transformers.py and benchmarks/bench_gguf.py (both compare the packed load with the
dequantized load of the same file, so only the file's consistency matters, not which model it came from).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# Which ggml type each kind of weight gets (the mix covers every type transformers 5.22.2 reads that the
# kernel implements: Q8_0, Q4_0, Q4_1, Q4_K, Q6_K).
DEFAULT_TYPES = {
    "token_embd": "Q8_0",
    "output": "Q6_K",
    "attn_q": "Q8_0",
    "attn_k": "Q4_0",
    "attn_v": "Q4_1",
    "attn_output": "Q4_K",
    "attn_qkv": "Q4_K",
    "attn_gate": "Q4_0",
    "ssm_alpha": "Q8_0",
    "ssm_beta": "Q8_0",
    "ssm_out": "Q4_1",
    "ffn_gate": "Q4_K",
    "ffn_up": "Q4_K",
    "ffn_down": "Q6_K",
}


@dataclass(frozen=True)
class Shape:
    """Qwen3.5's layout at a small size; every matrix's input width is a multiple of 256 (the K-quant block)."""

    vocab: int = 2048
    hidden: int = 512
    intermediate: int = 1536
    layers: int = 4  # full attention every fourth layer
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 64
    lin_k_heads: int = 4
    lin_v_heads: int = 8
    lin_k_dim: int = 64
    lin_v_dim: int = 64
    conv_kernel: int = 4
    types: dict = field(default_factory=lambda: dict(DEFAULT_TYPES))
    # Large files: draw Gaussian weights only where gguf quantizes them (in float32), and scale K-quant blocks to
    # 4 x the intended std directly. Faster to write, but another random stream, so the default keeps the exact one.
    fast: bool = False


def _blocks(name: str, w: np.ndarray) -> np.ndarray:
    """(out, in) float weights -> (out, bytes_per_row) blocks of a type gguf quantizes (Q8_0, Q4_0, Q4_1, Q5_*)."""
    import gguf

    return gguf.quants.quantize(w.astype(np.float32), gguf.GGMLQuantizationType[name])


def _kquant_blocks(name: str, shape: tuple[int, int], target: float, rng: np.random.Generator) -> np.ndarray:
    """Random K-quant codes, then each block's fp16 super-scales set so that its largest |w| is `target`."""
    import gguf
    from gguf import GGML_QUANT_SIZES

    qtype = gguf.GGMLQuantizationType[name]
    elems, nbytes = GGML_QUANT_SIZES[qtype]
    offsets = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "Q3_K": (108,), "Q2_K": (80, 82)}[name]
    nblk = shape[0] * shape[1] // elems
    raw = rng.integers(0, 256, size=(nblk, nbytes), dtype=np.uint8)
    one = np.full(nblk, 1.0, dtype=np.float16).view(np.uint8).reshape(nblk, 2)
    for off in offsets:
        raw[:, off : off + 2] = one
    # gguf's own block dequantizer, on chunks of blocks (gguf.quants.dequantize's row grouping is ~3x slower).
    dequant = getattr(gguf.quants, name).dequantize_blocks
    amax = np.concatenate(
        [np.abs(np.asarray(dequant(raw[i : i + 65536]), dtype=np.float32)).max(axis=1) for i in range(0, nblk, 65536)]
    )
    scale = np.where(amax > 0, target / np.maximum(amax, 1e-30), 1.0).astype(np.float16)
    for off in offsets:
        raw[:, off : off + 2] = scale.view(np.uint8).reshape(nblk, 2)
    return raw.reshape(shape[0], -1)


def write(path: Path, shape: Shape = Shape(), seed: int = 0) -> dict:
    """Write the file; returns {gguf tensor name: ggml type name or 'F32'}."""
    import gguf

    rng = np.random.default_rng(seed)
    s = shape
    writer = gguf.GGUFWriter(str(path), "qwen35")
    arch = "qwen35"
    kv = {
        "context_length": 4096,
        "embedding_length": s.hidden,
        "block_count": s.layers,
        "feed_forward_length": s.intermediate,
        "attention.head_count": s.heads,
        "attention.head_count_kv": s.kv_heads,
        "attention.key_length": s.head_dim,
        "attention.value_length": s.head_dim,
        "attention.layer_norm_rms_epsilon": 1e-6,
        "full_attention_interval": 4,
        "ssm.conv_kernel": s.conv_kernel,
        "ssm.state_size": s.lin_k_dim,
        "ssm.group_count": s.lin_k_heads,
        "ssm.time_step_rank": s.lin_v_heads,
        "ssm.inner_size": s.lin_v_heads * s.lin_v_dim,
        "rope.freq_base": 10000000.0,
        "rope.dimension_count": s.head_dim // 4,
    }
    for key, value in kv.items():
        full = f"{arch}.{key}"
        if isinstance(value, float):
            writer.add_float32(full, value)
        else:
            writer.add_uint32(full, value)
    writer.add_array(f"{arch}.rope.dimension_sections", [3, 3, 2, 0])
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(s.vocab)])
    writer.add_eos_token_id(1)
    writer.add_bos_token_id(0)

    written: dict[str, str] = {}

    def mat(gname: str, kind: str, out_f: int, in_f: int, std: float = 0.02) -> None:
        tname = s.types[kind]
        kquant = tname.endswith("_K")
        if s.fast and kquant:
            blocks = _kquant_blocks(tname, (out_f, in_f), 4.0 * std, rng)
        elif s.fast:
            blocks = _blocks(tname, rng.standard_normal((out_f, in_f), dtype=np.float32) * np.float32(std))
        else:
            w = rng.standard_normal((out_f, in_f)).astype(np.float32) * std
            blocks = _kquant_blocks(tname, w.shape, 4.0 * float(np.std(w)), rng) if kquant else _blocks(tname, w)
        writer.add_tensor(gname, blocks, raw_shape=blocks.shape, raw_dtype=gguf.GGMLQuantizationType[tname])
        written[gname] = tname

    def f32(gname: str, a: np.ndarray) -> None:
        writer.add_tensor(gname, a.astype(np.float32))
        written[gname] = "F32"

    def norm(gname: str, n: int) -> None:
        f32(gname, 1.0 + 0.05 * rng.standard_normal(n))  # stored as w + 1 (zero-centred RMSNorm)

    mat("token_embd.weight", "token_embd", s.vocab, s.hidden, std=1.0)
    norm("output_norm.weight", s.hidden)
    mat("output.weight", "output", s.vocab, s.hidden)
    qkv_rows = 2 * s.lin_k_heads * s.lin_k_dim + s.lin_v_heads * s.lin_v_dim
    for i in range(s.layers):
        b = f"blk.{i}"
        norm(f"{b}.attn_norm.weight", s.hidden)
        norm(f"{b}.post_attention_norm.weight", s.hidden)
        if (i + 1) % 4 == 0:  # full attention (q_proj carries the output gate: 2 x heads x head_dim)
            mat(f"{b}.attn_q.weight", "attn_q", 2 * s.heads * s.head_dim, s.hidden)
            mat(f"{b}.attn_k.weight", "attn_k", s.kv_heads * s.head_dim, s.hidden)
            mat(f"{b}.attn_v.weight", "attn_v", s.kv_heads * s.head_dim, s.hidden)
            mat(f"{b}.attn_output.weight", "attn_output", s.hidden, s.heads * s.head_dim)
            norm(f"{b}.attn_q_norm.weight", s.head_dim)
            norm(f"{b}.attn_k_norm.weight", s.head_dim)
        else:  # gated delta net
            mat(f"{b}.attn_qkv.weight", "attn_qkv", qkv_rows, s.hidden)
            mat(f"{b}.attn_gate.weight", "attn_gate", s.lin_v_heads * s.lin_v_dim, s.hidden)
            mat(f"{b}.ssm_alpha.weight", "ssm_alpha", s.lin_v_heads, s.hidden)
            mat(f"{b}.ssm_beta.weight", "ssm_beta", s.lin_v_heads, s.hidden)
            mat(f"{b}.ssm_out.weight", "ssm_out", s.hidden, s.lin_v_heads * s.lin_v_dim)
            f32(f"{b}.ssm_a", -np.exp(rng.uniform(-1.0, 1.0, s.lin_v_heads)))  # -exp(A_log)
            f32(f"{b}.ssm_dt.bias", rng.uniform(0.0, 1.0, s.lin_v_heads))
            f32(f"{b}.ssm_conv1d.weight", 0.2 * rng.standard_normal((qkv_rows, s.conv_kernel)))
            f32(f"{b}.ssm_norm.weight", 1.0 + 0.05 * rng.standard_normal(s.lin_v_dim))  # no offset here
        mat(f"{b}.ffn_gate.weight", "ffn_gate", s.intermediate, s.hidden)
        mat(f"{b}.ffn_up.weight", "ffn_up", s.intermediate, s.hidden)
        mat(f"{b}.ffn_down.weight", "ffn_down", s.hidden, s.intermediate)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written


if __name__ == "__main__":
    import sys

    print(write(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tiny-qwen35.gguf")))
