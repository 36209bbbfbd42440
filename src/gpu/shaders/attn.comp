#version 450
// attn.comp — attention of query rows over an F16 (attn_f16) or Q8_0 (attn_q8_0: KV_Q8_0) KV cache with GQA, one
// workgroup per (row, query head);
// query head h reads KV head h / (n_head / n_head_kv). Row i (= r0 + the workgroup's x: one dispatch per run of a
// multi-sequence batch, each run over its own sequence's cache) attends cells [0, n_cells[i]). Cells go in tiles of
// WG: each thread scores one cell (q . k * scale), then the tile's max and sum update a running (M, L) and the
// output accumulator is rescaled (online softmax, flash-attention style); thread t owns output dims t, t + WG, ...
// Q8_0: a cell's row is ggml's Q8_0 blocks of its n_head_kv * head_dim elements ({f16 d; int8 q[32]}, 34 bytes),
// offsets in bytes (even); with q8q (head_dim a multiple of 32) the query is rounded to Q8_0 first, as the CPU does
// (llama.cpp's vec_dot_type for a Q8_0 cache).
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
    uint ldq, ldo, kd;        // floats per q / out row; halves (Q8_0: bytes) per cache cell
    uint k_off, v_off;        // halves (Q8_0: bytes)
    float scale;
    uint r0;                  // first row of this dispatch
#ifdef KV_Q8_0
    uint q8q;                 // 1: round the query to Q8_0 (its heads on whole 32-element blocks)
#endif
} p;

shared float red[WG];
shared float qs[MAXD];
shared float ps[WG];
#include "reduce.glsl"

#ifdef KV_Q8_0
uint rd8(uint b, bool is_v) { return ((is_v ? V[b >> 2] : K[b >> 2]) >> ((b & 3u) * 8u)) & 0xFFu; }
// element e of the cell row starting at byte `row`
float kv_at(uint row, uint e, bool is_v) {
    const uint b = row + (e >> 5) * 34u;   // the block; even, so its f16 scale is in one word
    const float d = unpackHalf2x16(((is_v ? V[b >> 2] : K[b >> 2]) >> ((b & 2u) * 8u)) & 0xFFFFu).x;
    const uint q = rd8(b + 2u + (e & 31u), is_v);
    return d * float(int(q) - int((q & 0x80u) << 1));
}
#else
// element e of the cell row starting at half `row`
float kv_at(uint row, uint e, bool is_v) {
    const uint off = row + e;
    const uint w = is_v ? V[off >> 1] : K[off >> 1];
    return unpackHalf2x16(w >> ((off & 1u) * 16u)).x;
}
#endif

void main() {
    const uint h = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
    if (gl_WorkGroupID.x >= p.n_rows || h >= p.n_head) return;
    const uint i = p.r0 + gl_WorkGroupID.x;
    const uint D = p.head_dim;
    const uint hk = h / (p.n_head / p.n_head_kv);
    for (uint d = t; d < D; d += WG) qs[d] = Q[i * p.ldq + h * D + d];
    barrier();
#ifdef KV_Q8_0
    // the query as Q8_0 (ggml's quantize_row_q8_0: d = amax / 127, q = round(x / d), d kept as f16)
    for (uint blk = t; p.q8q != 0u && blk < D / 32u; blk += WG) {
        float amax = 0.0;
        for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(qs[blk * 32u + j]));
        const float dq = amax / 127.0, id = dq != 0.0 ? 1.0 / dq : 0.0;
        const float dh = unpackHalf2x16(packHalf2x16(vec2(dq, 0.0))).x;
        for (uint j = 0u; j < 32u; j++) {
            const float x = qs[blk * 32u + j] * id;
            qs[blk * 32u + j] = dh * sign(x) * floor(abs(x) + 0.5);
        }
    }
    barrier();
#endif
    const uint n = uint(n_cells[i]);
    float M = -1.0 / 0.0, L = 0.0;
    float acc[DPT];
    for (uint k = 0u; k < DPT; k++) acc[k] = 0.0;
    for (uint t0 = 0u; t0 < n; t0 += WG) {
        const uint c = t0 + t;
        float s = -1.0 / 0.0;
        if (c < n) {
            const uint kb = p.k_off + c * p.kd;
            float dot_ = 0.0;
            for (uint d = 0u; d < D; d++) dot_ += qs[d] * kv_at(kb, hk * D + d, false);
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
            for (uint cc = 0u; cc < nt; cc++) a += ps[cc] * kv_at(p.v_off + (t0 + cc) * p.kd, hk * D + d, true);
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
