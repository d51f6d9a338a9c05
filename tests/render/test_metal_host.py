"""The Metal host port (csrc/metal/ggml_metal_dispatch.h) against ggml's own host code, call for call.

Nothing here can run Metal. What can run is ggml's host half: ggml-metal-ops.cpp and ggml-metal-device.cpp
are plain C++ that reach the GPU only through the functions of ggml-metal-device.h that ggml-metal-device.m
implements in Objective-C. The harness compiles ggml's real .cpp files from a real upstream tree, replaces
that Objective-C half with recorders, builds real ggml graphs (ggml_gated_delta_net, ggml_flash_attn_ext),
and lets ggml encode them. Our rendered header is asked for the same ops in the same process, and every
dispatch is compared: pipeline function and cache key, each function constant (index, type, value), every
kargs field by name, each buffer binding (index -> tensor role + offset), threadgroup memory, grid and
threadgroup sizes.

A second group compiles the header against the bundled miniature upstream and checks the kargs struct
layout (offsets and sizes) that setBytes hands to the kernel.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.machine import REAL_UPSTREAM_ENV, real_upstream_export
from toolkit.core import package_facts
from toolkit.render import stage as render

# The first package's op facts over ggml's shared ones (templates/facts.py), as render sees them.
FACTS = package_facts.load(Path(__file__).resolve().parents[2] / "templates" / "ggml-attn-kernels", "ggml-attn-kernels")

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "ggml-attn-kernels" / "csrc" / "metal" / "ggml_metal_dispatch.h.j2"
MINI = REPO / "toolkit" / "data" / "mini-upstream"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")


def render_dispatch_header(dest: Path) -> Path:
    """Render our header the way `ggml-vendor render` does (same template, facts module as `facts`)."""
    text = (
        render.template_environment(REPO / "templates" / "ggml-attn-kernels")
        .get_template("csrc/metal/ggml_metal_dispatch.h.j2")
        .render(notice="generated for tests by tests/render/test_metal_host.py", facts=FACTS)
    )
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / "ggml_metal_dispatch.h"
    out.write_text(text)
    return out


def real_ggml_tree(tmp: Path) -> Path:
    """A real ggml tree in the standalone layout, exported from $GGML_VENDOR_REAL_UPSTREAM (skips without it)."""
    tree = real_upstream_export(tmp / "ggml", "include", "src")
    if not (tree / "src/ggml-metal/ggml-metal-ops.cpp").is_file():
        pytest.skip(f"{REAL_UPSTREAM_ENV} has no src/ggml-metal/ggml-metal-ops.cpp (pre-split host code)")
    return tree


# --- the harness ------------------------------------------------------------------------------------


def _kargs_printer() -> str:
    """C++ that prints every kargs field the package facts list, by name (a missing field fails to compile)."""
    out = []
    for struct, fields in FACTS.METAL_KARGS.items():
        body = ' + "," + '.join(f'F("{name}", a.{name})' for name, _ in fields)
        out.append(
            f"static std::string kargs_{struct}(const std::vector<uint8_t> & b) {{\n"
            f"    {struct} a; std::memset(&a, 0, sizeof a);\n"
            f"    std::memcpy(&a, b.data(), std::min(sizeof a, b.size()));\n"
            f'    return "{{" + {body} + "," + F("__size", (long long) b.size()) + "}}";\n}}\n'
        )
    return "\n".join(out)


DRIVER = r"""
#include "ggml.h"
#include "ggml-impl.h"
#include "ggml-backend.h"
#include "ggml-backend-impl.h"
#include "ggml-metal-device.h"
#include "ggml-metal-ops.h"
#include "ggml-metal-impl.h"
#include "ggml_metal_dispatch.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using namespace ggml_vendor_metal;

// ---- recorders standing in for ggml-metal-device.m ------------------------------------------------
struct Rec {
    std::string base, key;
    std::vector<FunctionConstant> cv;
    std::vector<uint8_t> args;
    std::vector<std::pair<int, uintptr_t>> buffers;
    uint64_t smem = 0;
    int grid[3] = {0, 0, 0}, threads[3] = {0, 0, 0};
};
static std::vector<Rec> g_recs;
static Rec g_cur;

struct ggml_metal_cv { std::vector<FunctionConstant> v; };
struct ggml_metal_pipeline { std::string base, key; std::vector<FunctionConstant> cv; };
struct ggml_metal_encoder { int unused; };
struct ggml_metal_library { int unused; };
struct ggml_metal_device { ggml_metal_device_props props; ggml_metal_library lib; };
static ggml_metal_device g_dev;

extern "C" {
ggml_metal_cv_t ggml_metal_cv_init(void) { return new ggml_metal_cv(); }
void ggml_metal_cv_free(ggml_metal_cv_t cv) { delete cv; }
void ggml_metal_cv_set_int16(ggml_metal_cv_t cv, int16_t v, int32_t i) { cv->v.push_back({i, FcType::Short, v}); }
void ggml_metal_cv_set_int32(ggml_metal_cv_t cv, int32_t v, int32_t i) { cv->v.push_back({i, FcType::Int, v}); }
void ggml_metal_cv_set_bool(ggml_metal_cv_t cv, bool v, int32_t i) { cv->v.push_back({i, FcType::Bool, v ? 1 : 0}); }
void ggml_metal_pipeline_free(ggml_metal_pipeline_t p) { delete p; }
struct ggml_metal_pipeline_with_params ggml_metal_library_get_pipeline(ggml_metal_library_t, const char *) {
    ggml_metal_pipeline_with_params r{}; return r;  // always a miss: every pipeline is "compiled" and recorded
}
struct ggml_metal_pipeline_with_params ggml_metal_library_compile_pipeline(ggml_metal_library_t, const char * base,
        const char * name, ggml_metal_cv_t cv) {
    ggml_metal_pipeline_with_params r{};
    r.pipeline = new ggml_metal_pipeline{base, name, cv ? cv->v : std::vector<FunctionConstant>{}};
    return r;
}
int ggml_metal_pipeline_max_theads_per_threadgroup(struct ggml_metal_pipeline_with_params) { return 1024; }
ggml_metal_encoder_t ggml_metal_encoder_init(ggml_metal_cmd_buf_t, bool) { return new ggml_metal_encoder(); }
void ggml_metal_encoder_free(ggml_metal_encoder_t e) { delete e; }
void ggml_metal_encoder_debug_group_push(ggml_metal_encoder_t, const char *) {}
void ggml_metal_encoder_debug_group_pop(ggml_metal_encoder_t) {}
void ggml_metal_encoder_set_pipeline(ggml_metal_encoder_t, struct ggml_metal_pipeline_with_params p) {
    g_cur = Rec(); g_cur.base = p.pipeline->base; g_cur.key = p.pipeline->key; g_cur.cv = p.pipeline->cv;
}
void ggml_metal_encoder_set_bytes(ggml_metal_encoder_t, void * data, size_t size, int idx) {
    if (idx != 0) { std::fprintf(stderr, "setBytes at index %d\n", idx); std::abort(); }
    g_cur.args.assign((uint8_t *) data, (uint8_t *) data + size);
}
void ggml_metal_encoder_set_buffer(ggml_metal_encoder_t, struct ggml_metal_buffer_id b, int idx) {
    g_cur.buffers.push_back({idx, (uintptr_t) b.offs});
}
void ggml_metal_encoder_set_threadgroup_memory_size(ggml_metal_encoder_t, size_t size, int) { g_cur.smem = size; }
void ggml_metal_encoder_dispatch_threadgroups(ggml_metal_encoder_t, int a, int b, int c, int x, int y, int z) {
    g_cur.grid[0] = a; g_cur.grid[1] = b; g_cur.grid[2] = c;
    g_cur.threads[0] = x; g_cur.threads[1] = y; g_cur.threads[2] = z;
    g_recs.push_back(g_cur);
}
void ggml_metal_encoder_memory_barrier(ggml_metal_encoder_t) {}
void ggml_metal_encoder_end_encoding(ggml_metal_encoder_t) {}
ggml_metal_library_t ggml_metal_device_get_library(ggml_metal_device_t dev) { return &dev->lib; }
ggml_metal_device_t ggml_metal_library_get_device(ggml_metal_library_t) { return &g_dev; }
const struct ggml_metal_device_props * ggml_metal_device_get_props(ggml_metal_device_t dev) { return &dev->props; }
struct ggml_metal_buffer_id ggml_metal_buffer_get_id(ggml_metal_buffer_t, const struct ggml_tensor * t) {
    return {(void *) 1, (size_t) (uintptr_t) t->data};  // the address identifies the tensor
}
// reached only by ops this harness never encodes
ggml_metal_device_t ggml_metal_device_init(int) { std::abort(); }
void ggml_metal_device_free(ggml_metal_device_t) { std::abort(); }
bool ggml_metal_device_supports_op(ggml_metal_device_t, const struct ggml_tensor *) { std::abort(); }
enum ggml_backend_buffer_usage ggml_backend_buffer_get_usage(ggml_backend_buffer_t) { std::abort(); }
size_t ggml_backend_buft_get_alloc_size(ggml_backend_buffer_type_t, const struct ggml_tensor *) { std::abort(); }
void ggml_backend_tensor_set(struct ggml_tensor *, const void *, size_t, size_t) { std::abort(); }
void ggml_backend_tensor_memset(struct ggml_tensor *, uint8_t, size_t, size_t) { std::abort(); }
}

// ---- printing -------------------------------------------------------------------------------------
static std::string F(const char * n, long long v) { return std::string("\"") + n + "\":" + std::to_string(v); }
static std::string F(const char * n, unsigned long long v) { return std::string("\"") + n + "\":" + std::to_string(v); }
static std::string F(const char * n, int v) { return F(n, (long long) v); }
static std::string F(const char * n, unsigned long v) { return F(n, (unsigned long long) v); }
static std::string F(const char * n, float v) { char b[64]; std::snprintf(b, sizeof b, "%.9g", v); return std::string("\"") + n + "\":\"" + b + "\""; }

@KARGS_PRINTERS@

static std::string kargs_json(const std::string & base, const std::vector<uint8_t> & b) {
    if (base.rfind("kernel_gated_delta_net", 0) == 0) return kargs_ggml_metal_kargs_gated_delta_net(b);
    if (base == "kernel_flash_attn_ext_pad") return kargs_ggml_metal_kargs_flash_attn_ext_pad(b);
    if (base == "kernel_flash_attn_ext_vec_reduce") return kargs_ggml_metal_kargs_flash_attn_ext_vec_reduce(b);
    if (base.rfind("kernel_flash_attn_ext_vec_", 0) == 0) return kargs_ggml_metal_kargs_flash_attn_ext_vec(b);
    return "\"unknown kargs\"";
}

static const char * fct(FcType t) { return t == FcType::Bool ? "bool" : t == FcType::Short ? "short" : "int"; }

static std::string disp_json(const std::string & base, const std::string & key, const std::vector<FunctionConstant> & cv,
                             const std::vector<uint8_t> & args, const std::vector<std::string> & bufs, uint64_t smem,
                             const uint32_t grid[3], const uint32_t threads[3]) {
    std::ostringstream o;
    o << "{\"base\":\"" << base << "\",\"key\":\"" << key << "\",\"constants\":[";
    for (size_t i = 0; i < cv.size(); ++i) {
        o << (i ? "," : "") << "[" << cv[i].index << ",\"" << fct(cv[i].type) << "\"," << cv[i].value << "]";
    }
    o << "],\"args\":" << kargs_json(base, args) << ",\"buffers\":[";
    for (size_t i = 0; i < bufs.size(); ++i) o << (i ? "," : "") << bufs[i];
    o << "],\"smem\":" << smem << ",\"grid\":[" << grid[0] << "," << grid[1] << "," << grid[2] << "],\"threads\":["
      << threads[0] << "," << threads[1] << "," << threads[2] << "]}";
    return o.str();
}

struct RoleAddr { Role role; uintptr_t addr; };

static std::string resolve(int idx, uintptr_t addr, const std::vector<RoleAddr> & roles) {
    for (const auto & r : roles) {
        if (r.addr == addr) {
            return "[" + std::to_string(idx) + ",\"" + role_name(r.role) + "\",0]";
        }
    }
    return "[" + std::to_string(idx) + ",\"unknown\"," + std::to_string(addr) + "]";
}

// A torch tensor (sizes, strides in elements, outermost first) through our from_torch.
static Tensor TT(std::initializer_list<int64_t> sizes, std::initializer_list<int64_t> strides, int64_t es = 4) {
    std::vector<int64_t> sz(sizes), st(strides);
    return from_torch(sz.data(), st.data(), es);
}

// ---- cases ----------------------------------------------------------------------------------------
static uintptr_t g_next = 0x100000000ull;
static ggml_backend_buffer g_buf;

static void place(ggml_tensor * t) {  // give a leaf a distinct fake address before views of it exist
    t->data = (void *) g_next;
    t->buffer = &g_buf;
    g_next += ((ggml_nbytes(t) + (1u << 20)) & ~((uintptr_t) 0xFFFF)) + 0x100000;
}

static ggml_metal_op_t begin(ggml_cgraph * gf) {
    g_recs.clear();
    return ggml_metal_op_init(&g_dev, nullptr, gf, 0, ggml_graph_n_nodes(gf), false, false, false, 0, 0);
}

static void emit(const char * name, const std::vector<RoleAddr> & roles, const std::vector<Dispatch> & ours) {
    std::ostringstream o;
    o << "{\"case\":\"" << name << "\",\"ggml\":[";
    for (size_t i = 0; i < g_recs.size(); ++i) {
        const Rec & r = g_recs[i];
        std::vector<std::string> bufs;
        for (auto & b : r.buffers) bufs.push_back(resolve(b.first, b.second, roles));
        uint32_t grid[3] = {(uint32_t) r.grid[0], (uint32_t) r.grid[1], (uint32_t) r.grid[2]};
        uint32_t thr[3] = {(uint32_t) r.threads[0], (uint32_t) r.threads[1], (uint32_t) r.threads[2]};
        o << (i ? "," : "") << disp_json(r.base, r.key, r.cv, r.args, bufs, r.smem, grid, thr);
    }
    o << "],\"ours\":[";
    for (size_t i = 0; i < ours.size(); ++i) {
        const Dispatch & d = ours[i];
        std::vector<std::string> bufs;
        for (auto & b : d.buffers) {
            bufs.push_back("[" + std::to_string(b.index) + ",\"" + role_name(b.role) + "\"," + std::to_string(b.offset) + "]");
        }
        o << (i ? "," : "") << disp_json(d.pipeline.base, d.pipeline.key, d.pipeline.constants, d.args, bufs,
                                         d.threadgroup_memory, d.grid, d.threads);
    }
    o << "]}";
    std::cout << o.str() << std::endl;
}

static void run_gdn(ggml_context * ctx, const std::string & name, int64_t S, int64_t H, int64_t Hk, int64_t T, int64_t B,
                    int64_t G, int K, int fused) {
    ggml_tensor *q, *k, *v;
    if (fused) {  // q, k, v as views of one projection output, heads concatenated per token
        ggml_tensor * qkv = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, S, 2*Hk + H, T, B);
        place(qkv);
        q = ggml_view_4d(ctx, qkv, S, Hk, T, B, qkv->nb[1], qkv->nb[2], qkv->nb[3], 0);
        k = ggml_view_4d(ctx, qkv, S, Hk, T, B, qkv->nb[1], qkv->nb[2], qkv->nb[3], Hk*qkv->nb[1]);
        v = ggml_view_4d(ctx, qkv, S, H, T, B, qkv->nb[1], qkv->nb[2], qkv->nb[3], 2*Hk*qkv->nb[1]);
    } else {
        q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, S, Hk, T, B); place(q);
        k = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, S, Hk, T, B); place(k);
        v = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, S, H, T, B);  place(v);
    }
    ggml_tensor * g = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, G, H, T, B); place(g);
    ggml_tensor * beta = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, H, T, B); place(beta);
    ggml_tensor * state = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, S, S, H, B); place(state);
    ggml_tensor * op = ggml_gated_delta_net(ctx, q, k, v, g, beta, state, K); place(op);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, op);

    ggml_metal_op_t mctx = begin(gf);
    ggml_metal_op_gated_delta_net(mctx, ggml_metal_op_n_nodes(mctx) - 1);
    ggml_metal_op_free(mctx);

    // Ours sees the same memory the way a torch caller describes it: q, k, v (B, T, H, D) -- views of a
    // (B, T, 2*Hk + H, D) projection when fused --, g (B, T, H) unsqueezed to (B, T, H, 1) or (B, T, H, D).
    const int64_t W = fused ? 2*Hk + H : 0;
    const Tensor tq = fused ? TT({B, T, Hk, S}, {T*W*S, W*S, S, 1}) : TT({B, T, Hk, S}, {T*Hk*S, Hk*S, S, 1});
    const Tensor tv = fused ? TT({B, T, H, S}, {T*W*S, W*S, S, 1}) : TT({B, T, H, S}, {T*H*S, H*S, S, 1});
    const Tensor tg = G == 1 ? TT({B, T, H, 1}, {T*H, H, 1, 1}) : TT({B, T, H, S}, {T*H*S, H*S, S, 1});
    const Tensor dst = gdn_dst(S, H, T, B, K);
    const std::string err = gdn_check(tv, tg, dst, K);
    if (!err.empty()) { std::fprintf(stderr, "%s: ours refused: %s\n", name.c_str(), err.c_str()); std::exit(3); }
    std::vector<Dispatch> ours = {gated_delta_net(tq, tq, tv, tg, dst, K)};
    emit(name.c_str(), {{Role::Q, (uintptr_t) q->data}, {Role::K, (uintptr_t) k->data}, {Role::V, (uintptr_t) v->data},
                        {Role::G, (uintptr_t) g->data}, {Role::BETA, (uintptr_t) beta->data},
                        {Role::STATE, (uintptr_t) state->data}, {Role::DST, (uintptr_t) op->data}}, ours);
}

static void run_fa(ggml_context * ctx, const std::string & name, int64_t D, int64_t DV, int64_t nq, int64_t H, int64_t Hkv,
                   int64_t nkv, int64_t cap, int64_t B, const std::string & kv, int with_mask, int64_t maskB,
                   int64_t maskH, float scale, float max_bias, float softcap, int with_sinks) {
    const ggml_type kt = kv == "f32" ? GGML_TYPE_F32 : GGML_TYPE_F16;
    ggml_tensor * q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, nq, H, B); place(q);
    ggml_tensor * kc = ggml_new_tensor_4d(ctx, kt, D, cap, Hkv, B); place(kc);   // a KV cache, used up to n_kv
    ggml_tensor * vc = ggml_new_tensor_4d(ctx, kt, DV, cap, Hkv, B); place(vc);
    ggml_tensor * k = ggml_view_4d(ctx, kc, D, nkv, Hkv, B, kc->nb[1], kc->nb[2], kc->nb[3], 0);
    ggml_tensor * v = ggml_view_4d(ctx, vc, DV, nkv, Hkv, B, vc->nb[1], vc->nb[2], vc->nb[3], 0);
    ggml_tensor * mask = nullptr;
    if (with_mask) { mask = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, nkv, nq, maskH, maskB); place(mask); }
    ggml_tensor * op = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, max_bias, softcap);
    ggml_tensor * sinks = nullptr;
    if (with_sinks) { sinks = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, H); place(sinks); ggml_flash_attn_ext_add_sinks(op, sinks); }
    place(op);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, op);

    if (!ggml_metal_op_flash_attn_ext_use_vec(op)) { std::fprintf(stderr, "%s: ggml would not use the vec kernel\n", name.c_str()); std::exit(3); }
    const uintptr_t pad = (uintptr_t) op->data + ggml_nbytes(op);
    const uintptr_t tmp = pad + ggml_metal_op_flash_attn_ext_extra_pad(op) + ggml_metal_op_flash_attn_ext_extra_blk(op);

    ggml_metal_op_t mctx = begin(gf);
    ggml_metal_op_flash_attn_ext(mctx, ggml_metal_op_n_nodes(mctx) - 1);
    ggml_metal_op_free(mctx);

    // Ours: the torch caller's view of the same memory. q (B, H, n_q, D); k, v (B, H_kv, cap, D) caches sliced
    // to n_kv; mask (mask_B, mask_H, n_q, n_kv) contiguous; out (B, n_q, H, DV) contiguous.
    const int64_t es = ggml_type_size(kt);
    const Tensor tq = TT({B, H, nq, D}, {H*nq*D, nq*D, D, 1});
    const Tensor tk = TT({B, Hkv, nkv, D}, {Hkv*cap*D, cap*D, D, 1}, es);
    const Tensor tv = TT({B, Hkv, nkv, DV}, {Hkv*cap*DV, cap*DV, DV, 1}, es);
    const Tensor tm = TT({maskB, maskH, nq, nkv}, {maskH*nq*nkv, nq*nkv, nkv, 1}, 2);
    const Tensor to = TT({B, nq, H, DV}, {nq*H*DV, H*DV, DV, 1});
    const Tensor * pm = mask ? &tm : nullptr;
    const std::string err = fa_vec_check(tq, tk, tv, pm, to);
    if (!err.empty()) { std::fprintf(stderr, "%s: ours refused: %s\n", name.c_str(), err.c_str()); std::exit(3); }
    FaParams p;
    p.scale = scale; p.max_bias = max_bias; p.logit_softcap = softcap; p.has_sinks = with_sinks != 0; p.kv_type = ggml_type_name(kt);
    const std::vector<Dispatch> ours = flash_attn_ext_vec(tq, tk, tv, pm, to, p);
    const FaScratch s = fa_vec_scratch(tq, tk, tv, pm);
    // scratch sizes go to stderr-free channel: a separate line per case
    std::vector<RoleAddr> roles = {{Role::Q, (uintptr_t) q->data}, {Role::K, (uintptr_t) k->data}, {Role::V, (uintptr_t) v->data},
                                   {Role::DST, (uintptr_t) op->data}, {Role::PAD, pad}, {Role::TMP, tmp}};
    if (mask) roles.push_back({Role::MASK, (uintptr_t) mask->data});
    if (sinks) roles.push_back({Role::SINKS, (uintptr_t) sinks->data});
    emit(name.c_str(), roles, ours);
    std::cout << "{\"scratch\":\"" << name << "\",\"pad\":" << s.pad << ",\"tmp\":" << s.tmp
              << ",\"ggml_tmp\":" << ggml_metal_op_flash_attn_ext_extra_tmp(op) << "}" << std::endl;
}

int main() {
    g_dev.props.max_theadgroup_memory_size = 32768;
    g_dev.props.has_simdgroup_reduction = true;
    g_buf.context = (void *) 1;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.empty()) continue;
        ggml_init_params ip = {256u << 20, nullptr, true};
        ggml_context * ctx = ggml_init(ip);
        std::istringstream in(line);
        std::string kind, name;
        in >> kind >> name;
        if (kind == "gdn") {
            int64_t S, H, Hk, T, B, G; int K, fused;
            in >> S >> H >> Hk >> T >> B >> G >> K >> fused;
            run_gdn(ctx, name, S, H, Hk, T, B, G, K, fused);
        } else if (kind == "fa") {
            int64_t D, DV, nq, H, Hkv, nkv, cap, B, mB, mH; int m, sinks; std::string kv; float sc, mb, cap_;
            in >> D >> DV >> nq >> H >> Hkv >> nkv >> cap >> B >> kv >> m >> mB >> mH >> sc >> mb >> cap_ >> sinks;
            run_fa(ctx, name, D, DV, nq, H, Hkv, nkv, cap, B, kv, m, mB, mH, sc, mb, cap_, sinks);
        }
        ggml_free(ctx);
    }
    return 0;
}
"""

# name: (S_v, H, H_k, T, B, G, K, fused qkv views)
GDN_CASES = {
    "gdn-decode-128": (128, 32, 32, 1, 1, 1, 1, 0),
    "gdn-prefill-64-batch": (64, 8, 8, 7, 3, 1, 1, 0),
    "gdn-32-tiled-gqa": (32, 16, 4, 5, 2, 1, 1, 0),
    "gdn-kda-128": (128, 4, 4, 3, 2, 128, 1, 0),
    "gdn-snapshots-K3": (64, 4, 4, 5, 2, 1, 3, 0),
    "gdn-fused-qkv-views": (128, 8, 8, 4, 2, 1, 1, 1),
}
# name: (D, DV, n_q, H, H_kv, n_kv, cache capacity, B, kv type, mask, mask B, mask heads, scale, max_bias,
#        softcap, sinks)
FA_CASES = {
    "fa-decode-gqa-unpadded": (128, 128, 1, 16, 4, 141, 256, 1, "f16", 1, 1, 1, 0.088, 0.0, 0.0, 0),
    "fa-decode-aligned-nomask": (64, 64, 1, 8, 8, 512, 512, 2, "f16", 0, 1, 1, 0.125, 0.0, 0.0, 0),
    "fa-nsg2": (256, 256, 1, 16, 4, 3000, 4096, 1, "f16", 1, 1, 1, 0.0625, 0.0, 0.0, 0),
    "fa-nsg4-batch-mask": (128, 128, 3, 8, 2, 9000, 9000, 2, "f16", 1, 2, 1, 0.088, 0.0, 0.0, 0),
    "fa-f32-kv-mla": (576, 512, 2, 4, 1, 77, 128, 1, "f32", 1, 1, 1, 0.04, 0.0, 0.0, 0),
    "fa-softcap-alibi-sinks": (96, 96, 5, 6, 3, 100, 100, 2, "f16", 1, 1, 1, 0.1, 8.0, 30.0, 1),
    "fa-192-128-perhead-mask": (192, 128, 19, 4, 4, 64, 64, 1, "f16", 1, 1, 4, 0.07, 0.0, 0.0, 0),
}


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("metal-host")
    tree = real_ggml_tree(tmp)
    src = tree / "src"
    gen = tmp / "gen"
    render_dispatch_header(gen)
    (gen / "driver.cpp").write_text(DRIVER.replace("@KARGS_PRINTERS@", _kargs_printer()))
    inc = ["-I", str(tree / "include"), "-I", str(src), "-I", str(src / "ggml-metal"), "-I", str(gen)]
    defs = ["-D_GNU_SOURCE", '-DGGML_VERSION="0"', '-DGGML_COMMIT="0"']
    objs = []
    jobs = [
        ("gcc", "-std=c11", src / "ggml.c"),
        ("gcc", "-std=c11", src / "ggml-quants.c"),
        ("g++", "-std=c++17", src / "ggml-threading.cpp"),
    ]
    jobs += [
        ("g++", "-std=c++17", src / "ggml-metal" / f)
        for f in ("ggml-metal-ops.cpp", "ggml-metal-device.cpp", "ggml-metal-common.cpp")
    ]
    jobs.append(("g++", "-std=c++17", gen / "driver.cpp"))
    procs = []
    for cc, std, path in jobs:
        obj = tmp / (path.name + ".o")
        procs.append(
            (
                path,
                subprocess.Popen(
                    [cc, std, "-O0", "-c", str(path), "-o", str(obj), *inc, *defs], stderr=subprocess.PIPE, text=True
                ),
            )
        )
        objs.append(str(obj))
    for path, p in procs:
        _, errtext = p.communicate()
        assert p.returncode == 0, f"compiling {path} failed:\n{errtext[-4000:]}"
    exe = tmp / "driver"
    link = subprocess.run(["g++", *objs, "-o", str(exe), "-lm", "-lpthread"], capture_output=True, text=True)
    assert link.returncode == 0, link.stderr[-4000:]
    return exe


def _run(exe: Path, lines: list[str]) -> dict[str, dict[str, Any]]:
    res = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    docs = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    out: dict[str, dict[str, Any]] = {}
    for d in docs:
        if "case" in d:
            out[d["case"]] = d
        else:
            out[d["scratch"]]["scratch"] = d
    return out


def _assert_same(case: str, ggml: list[dict[str, Any]], ours: list[dict[str, Any]]) -> None:
    assert [d["base"] for d in ours] == [d["base"] for d in ggml], f"{case}: kernels differ"
    for i, (g, o) in enumerate(zip(ggml, ours)):
        where = f"{case} dispatch {i} ({g['base']})"
        assert o["key"] == g["key"], f"{where}: pipeline key"
        assert o["constants"] == g["constants"], f"{where}: function constants"
        assert o["args"] == g["args"], f"{where}: kargs"
        assert o["buffers"] == g["buffers"], f"{where}: buffer bindings"
        assert o["smem"] == g["smem"], f"{where}: threadgroup memory"
        assert (o["grid"], o["threads"]) == (g["grid"], g["threads"]), f"{where}: dispatch size"


@pytest.mark.real_upstream
def test_gated_delta_net_matches_ggml_host_code(harness: Path) -> None:
    got = _run(harness, [f"gdn {name} " + " ".join(map(str, c)) for name, c in GDN_CASES.items()])
    assert set(got) == set(GDN_CASES)
    for name, doc in got.items():
        assert len(doc["ggml"]) == 1, f"{name}: ggml encoded {len(doc['ggml'])} dispatches"
        _assert_same(name, doc["ggml"], doc["ours"])
    # spot-check the facts the docs state (docs/upstream.md §2.1): (S_v/nsg, H, B) x (32, nsg, 1), FC 1600+
    d = got["gdn-decode-128"]["ours"][0]
    assert d["base"] == "kernel_gated_delta_net_f32_4"
    assert d["grid"] == [32, 32, 1] and d["threads"] == [32, 4, 1]
    assert [c[0] for c in d["constants"]] == [1600, 1601, 1602]
    assert d["key"] == "kernel_gated_delta_net_f32_4_ne20=128_ne30=1_K=1"


@pytest.mark.real_upstream
def test_flash_attn_vec_matches_ggml_host_code(harness: Path) -> None:
    got = _run(harness, [f"fa {name} " + " ".join(map(str, c)) for name, c in FA_CASES.items()])
    assert set(got) == set(FA_CASES)
    for name, doc in got.items():
        _assert_same(name, doc["ggml"], doc["ours"])
        kernels = [d["base"] for d in doc["ours"]]
        n_kv = FA_CASES[name][5]
        assert (
            kernels[0] == "kernel_flash_attn_ext_pad"
            if n_kv % 32
            else kernels[0].startswith("kernel_flash_attn_ext_vec_")
        ), name
        assert kernels[-1] == "kernel_flash_attn_ext_vec_reduce"
        # our tmp scratch is what ggml reserves for it
        assert doc["scratch"]["tmp"] == doc["scratch"]["ggml_tmp"], name
    vec = {
        name: [
            x
            for x in d["ours"]
            if x["base"].startswith("kernel_flash_attn_ext_vec_") and x["base"] != "kernel_flash_attn_ext_vec_reduce"
        ][0]
        for name, d in got.items()
    }
    assert vec["fa-decode-gqa-unpadded"]["threads"] == [32, 1, 1]
    assert vec["fa-nsg2"]["threads"] == [32, 2, 1]
    assert vec["fa-nsg4-batch-mask"]["threads"] == [32, 4, 1]
