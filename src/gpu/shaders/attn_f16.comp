#version 450
// attn_f16.comp — attention of query rows over an F16 KV cache with GQA: one workgroup per (row, query head);
// query head h reads KV head h / (n_head / n_head_kv). Row i (= r0 + the workgroup's x: one dispatch per run of a
// multi-sequence batch, each run over its own sequence's cache) attends cells [0, n_cells[i]). Cells go in tiles of
// WG: each thread scores one cell (q . k * scale), then the tile's max and sum update a running (M, L) and the
// output accumulator is rescaled (online softmax, flash-attention style); thread t owns output dims t, t + WG, ...
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
const uint MAXD = 256u;   // head_dim <= 256
const uint DPT = MAXD / 16u;   // output dims per thread: head_dim / WG <= 16

layout(std430, binding = 0) readonly buffer BQ { float Q[]; };
layout(std430, binding = 1) readonly buffer BK { uint K[]; };
layout(std430, binding = 2) readonly buffer BV { uint V[]; };
layout(std430, binding = 3) readonly buffer BN { int n_cells[]; };
layout(std430, binding = 4) writeonly buffer BO { float O[]; };
layout(push_constant) uniform P {
    uint n_rows, n_head, n_head_kv, head_dim;
    uint ldq, ldo, kd;        // floats per q / out row; halves per cache cell (n_head_kv * head_dim)
    uint k_off, v_off;        // halves
    float scale;
    uint r0;                  // first row of this dispatch
} p;

shared float red[WG];
shared float qs[MAXD];
shared float ps[WG];
#include "reduce.glsl"

float kv_at(uint off_halves, bool is_v) {
    const uint w = is_v ? V[off_halves >> 1] : K[off_halves >> 1];
    return unpackHalf2x16(w >> ((off_halves & 1u) * 16u)).x;
}

void main() {
    const uint h = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    if (gl_WorkGroupID.x >= p.n_rows || h >= p.n_head) return;
    const uint i = p.r0 + gl_WorkGroupID.x;
    const uint D = p.head_dim;
    const uint hk = h / (p.n_head / p.n_head_kv);
    for (uint d = t; d < D; d += WG) qs[d] = Q[i * p.ldq + h * D + d];
    barrier();
    const uint n = uint(n_cells[i]);
    float M = -1.0 / 0.0, L = 0.0;
    float acc[DPT];
    for (uint k = 0u; k < DPT; k++) acc[k] = 0.0;
    for (uint t0 = 0u; t0 < n; t0 += WG) {
        const uint c = t0 + t;
        float s = -1.0 / 0.0;
        if (c < n) {
            const uint kb = p.k_off + c * p.kd + hk * D;
            float dot_ = 0.0;
            for (uint d = 0u; d < D; d++) dot_ += qs[d] * kv_at(kb + d, false);
            s = dot_ * p.scale;
        }
        const float mt = wg_max(s);
        const float Mn = max(M, mt);
        const float e = c < n ? exp(s - Mn) : 0.0;
        const float lt = wg_sum(e);
        const float alpha = exp(M - Mn);   // 0 on the first tile (M = -inf)
        L = L * alpha + lt;
        M = Mn;
        ps[t] = e;
        barrier();
        const uint nt = min(WG, n - t0);
        for (uint k = 0u; k < DPT; k++) {
            const uint d = t + k * WG;
            if (d >= D) break;
            float a = acc[k] * alpha;
            for (uint cc = 0u; cc < nt; cc++) a += ps[cc] * kv_at(p.v_off + (t0 + cc) * p.kd + hk * D + d, true);
            acc[k] = a;
        }
        barrier();
    }
    const float inv = 1.0 / L;
    for (uint k = 0u; k < DPT; k++) {
        const uint d = t + k * WG;
        if (d >= D) break;
        O[i * p.ldo + h * D + d] = acc[k] * inv;
    }
}
