// Miniature ggml-metal.metal (written by the ggml-vendor authors): the gated delta net and vector flash
// attention entry points with ggml's host names, function constants and kargs, in plain per-thread code.
#define GGML_COMMON_DECL_METAL
#define GGML_COMMON_IMPL_METAL
#if defined(GGML_METAL_EMBED_LIBRARY)
__embed_ggml-common.h__
#else
#include "ggml-common.h"
#endif
#include "ggml-metal-impl.h"

#include <metal_stdlib>

using namespace metal;

#define N_SIMDWIDTH 32

constant short FC_gated_delta_net_ne20 [[function_constant(FC_GATED_DELTA_NET + 0)]];
constant short FC_gated_delta_net_ne30 [[function_constant(FC_GATED_DELTA_NET + 1)]];
constant short FC_gated_delta_net_K    [[function_constant(FC_GATED_DELTA_NET + 2)]];

template<short NSG>
kernel void kernel_gated_delta_net_impl(
        constant ggml_metal_kargs_gated_delta_net & args,
        device const char * q,
        device const char * k,
        device const char * v,
        device const char * g,
        device const char * b,
        device const char * s,
        device       char * dst,
        uint3 tgpig[[threadgroup_position_in_grid]],
        ushort3 tpitg[[thread_position_in_threadgroup]],
        ushort sgitg[[simdgroup_index_in_threadgroup]]) {
    const int S_v  = args.ne20;
    const int head = tgpig.y;
    const int seq  = tgpig.z;
    const int col  = tgpig.x*NSG*N_SIMDWIDTH + sgitg*N_SIMDWIDTH + tpitg.x;
    if (col >= S_v) {
        return;
    }
    device const float * s_in  = (device const float *) s + ((int64_t) seq*args.ne21 + head)*S_v*S_v + col*S_v;
    device       float * attn  = (device float *) dst + (int64_t) seq*args.ne2*args.ne21*S_v + head*S_v;
    device       float * s_out = (device float *) dst + (int64_t) args.ne0*args.ne1*args.ne2*args.ne3
                                 + ((int64_t) seq*args.ne21 + head)*S_v*S_v + col*S_v;
    float acc_state[128];
    for (int i = 0; i < S_v; ++i) {
        acc_state[i] = s_in[i];
    }
    for (int t = 0; t < args.ne22; ++t) {
        device const float * q_t = (device const float *) (q + seq*args.nb03 + t*args.nb02 + (head % args.ne01)*args.nb01);
        device const float * k_t = (device const float *) (k + seq*args.nb03 + t*args.nb02 + (head % args.ne01)*args.nb01);
        device const float * v_t = (device const float *) (v + seq*args.nb23 + t*args.nb22 + head*args.nb21);
        const float g_t = exp(((device const float *) g)[(seq*args.ne22 + t)*args.ne21 + head]);
        const float b_t = ((device const float *) b)[(seq*args.ne22 + t)*args.ne21 + head];
        float kv = 0.0f;
        for (int i = 0; i < S_v; ++i) {
            acc_state[i] *= g_t;
            kv += acc_state[i]*k_t[i];
        }
        const float delta = (v_t[col] - kv)*b_t;
        float out = 0.0f;
        for (int i = 0; i < S_v; ++i) {
            acc_state[i] += k_t[i]*delta;
            out += acc_state[i]*q_t[i];
        }
        attn[(int64_t) t*args.ne21*S_v + col] = out;
    }
    for (int i = 0; i < S_v; ++i) {
        s_out[i] = acc_state[i];
    }
}

typedef decltype(kernel_gated_delta_net_impl<4>) kernel_gated_delta_net_t;

template [[host_name("kernel_gated_delta_net_f32_1")]] kernel kernel_gated_delta_net_t kernel_gated_delta_net_impl<1>;
template [[host_name("kernel_gated_delta_net_f32_2")]] kernel kernel_gated_delta_net_t kernel_gated_delta_net_impl<2>;
template [[host_name("kernel_gated_delta_net_f32_4")]] kernel kernel_gated_delta_net_t kernel_gated_delta_net_impl<4>;

constant bool FC_flash_attn_ext_vec_has_mask  [[function_constant(FC_FLASH_ATTN_EXT_VEC + 0)]];
constant bool FC_flash_attn_ext_vec_has_sinks [[function_constant(FC_FLASH_ATTN_EXT_VEC + 1)]];
constant bool FC_flash_attn_ext_vec_has_bias  [[function_constant(FC_FLASH_ATTN_EXT_VEC + 2)]];
constant bool FC_flash_attn_ext_vec_has_scap  [[function_constant(FC_FLASH_ATTN_EXT_VEC + 3)]];
constant bool FC_flash_attn_ext_vec_has_kvpad [[function_constant(FC_FLASH_ATTN_EXT_VEC + 4)]];

constant int32_t FC_flash_attn_ext_vec_ns10 [[function_constant(FC_FLASH_ATTN_EXT_VEC + 20)]];
constant int32_t FC_flash_attn_ext_vec_ns20 [[function_constant(FC_FLASH_ATTN_EXT_VEC + 21)]];
constant int32_t FC_flash_attn_ext_vec_nsg  [[function_constant(FC_FLASH_ATTN_EXT_VEC + 22)]];
constant int32_t FC_flash_attn_ext_vec_nwg  [[function_constant(FC_FLASH_ATTN_EXT_VEC + 23)]];

template<short DK, short DV>
kernel void kernel_flash_attn_ext_vec(
        constant ggml_metal_kargs_flash_attn_ext_vec & args,
        device const char * q,
        device const char * k,
        device const char * v,
        device const char * mask,
        device const char * sinks,
        device const char * pad,
        device       char * dst,
        uint3 tgpig[[threadgroup_position_in_grid]],
        ushort tiisg[[thread_index_in_simdgroup]]) {
    const int iq1 = tgpig.x;
    const int iq2 = tgpig.y;
    const int iq3 = tgpig.z;
    const int ikv2 = iq2/(args.ne02/args.ne_12_2);
    device const float * q_r = (device const float *) (q + iq1*args.nb01 + iq2*args.nb02 + iq3*args.nb03);
    float kqmax = -INFINITY, kqsum = 0.0f;
    float acc[DV/N_SIMDWIDTH];
    for (short i = 0; i < DV/N_SIMDWIDTH; ++i) {
        acc[i] = 0.0f;
    }
    for (int ic = 0; ic < args.ne11; ++ic) {
        device const half * k_r = (device const half *) (k + ic*args.nb11 + ikv2*args.nb12 + iq3*args.nb13);
        device const half * v_r = (device const half *) (v + ic*args.nb21 + ikv2*args.nb22 + iq3*args.nb23);
        float s = 0.0f;
        for (short d = 0; d < DK; ++d) {
            s += q_r[d]*float(k_r[d]);
        }
        s *= args.scale;
        if (FC_flash_attn_ext_vec_has_scap) {
            s = args.logit_softcap*precise::tanh(s);
        }
        if (FC_flash_attn_ext_vec_has_mask) {
            s += float(((device const half *) (mask + iq1*args.nb31 + (iq3 % args.ne33)*args.nb33))[ic]);
        }
        const float m = max(kqmax, s);
        const float corr = exp(kqmax - m);
        const float p = exp(s - m);
        for (short i = 0; i < DV/N_SIMDWIDTH; ++i) {
            acc[i] = acc[i]*corr + p*float(v_r[i*N_SIMDWIDTH + tiisg]);
        }
        kqsum = kqsum*corr + p;
        kqmax = m;
    }
    device float * d_r = (device float *) dst + ((int64_t) (iq3*args.ne2 + iq1)*args.ne1 + iq2)*DV;
    for (short i = 0; i < DV/N_SIMDWIDTH; ++i) {
        d_r[i*N_SIMDWIDTH + tiisg] = acc[i]/kqsum;
    }
}

typedef decltype(kernel_flash_attn_ext_vec<128, 128>) flash_attn_ext_vec_t;

template [[host_name("kernel_flash_attn_ext_vec_f16_dk64_dv64")]]   kernel flash_attn_ext_vec_t kernel_flash_attn_ext_vec<64,  64>;
template [[host_name("kernel_flash_attn_ext_vec_f16_dk128_dv128")]] kernel flash_attn_ext_vec_t kernel_flash_attn_ext_vec<128, 128>;
template [[host_name("kernel_flash_attn_ext_vec_f16_dk256_dv256")]] kernel flash_attn_ext_vec_t kernel_flash_attn_ext_vec<256, 256>;
