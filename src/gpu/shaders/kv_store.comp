#version 450
// kv_store.comp — KV cache write: F32 row i of n (kd floats) into cell cells[i] of the cache. F16 (kv_store_f16):
// kd halves per cell (kd even, k_off in halves, even), round to nearest even, a thread per pair of halves. Q8_0
// (kv_store_q8_0, KV_Q8_0): ggml's Q8_0 blocks of the row (kd a multiple of 32: kd / 32 blocks of {f16 d; int8
// q[32]}, 34 bytes; d = amax / 127, q = round(x / d), as quantize_row_q8_0), k_off in bytes (even); a thread per
// 32-bit word of the row, the words a row shares with its neighbour (a row of an odd number of blocks is not
// word-aligned) written with atomics on its bytes only. Rows r0 + i of X and cells (a run of a multi-sequence
// batch whose sequence owns the cache).
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(std430, binding = 0) readonly buffer BX { float X[]; };
layout(std430, binding = 1) readonly buffer BI { int cells[]; };
layout(std430, binding = 2) buffer BK { uint K[]; };
layout(push_constant) uniform P { uint n, kd, ldx, x_off, k_off, r0; } p;

#ifdef KV_Q8_0
const uint MAXB = 256u;   // kd <= 8192
shared float idsh[MAXB];
shared uint hsh[MAXB];
#endif

void main() {
    if (gl_WorkGroupID.x >= p.n) return;
    const uint i = p.r0 + gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    const uint src = p.x_off + i * p.ldx;
#ifdef KV_Q8_0
    const uint nb = p.kd / 32u, rb = nb * 34u;
    for (uint b = t; b < nb; b += WG) {
        float amax = 0.0;
        for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(X[src + b * 32u + j]));
        const float d = amax / 127.0;
        idsh[b] = d != 0.0 ? 1.0 / d : 0.0;
        hsh[b] = packHalf2x16(vec2(d, 0.0)) & 0xFFFFu;
    }
    barrier();
    const uint rs = p.k_off + uint(cells[i]) * rb, re = rs + rb;   // the row's bytes [rs, re)
    for (uint w = rs / 4u + t; w <= (re - 1u) / 4u; w += WG) {
        uint word = 0u, mask = 0u;
        for (uint j = 0u; j < 4u; j++) {
            const uint at = 4u * w + j;
            if (at < rs || at >= re) continue;
            const uint bi = at - rs, b = bi / 34u, o = bi - b * 34u;
            uint byte;
            if (o < 2u) {
                byte = (hsh[b] >> (o * 8u)) & 0xFFu;
            } else {
                const float x = X[src + b * 32u + (o - 2u)] * idsh[b];
                byte = uint(int(sign(x) * floor(abs(x) + 0.5))) & 0xFFu;
            }
            word |= byte << (8u * j);
            mask |= 0xFFu << (8u * j);
        }
        if (mask == 0xFFFFFFFFu) {
            K[w] = word;
        } else {   // a word shared with the neighbouring cell's row (rows are not word-aligned): its bytes only
            atomicAnd(K[w], ~mask);
            atomicOr(K[w], word);
        }
    }
#else
    const uint dst = (p.k_off + uint(cells[i]) * p.kd) / 2u;
    for (uint e = t; e < p.kd / 2u; e += WG) {
        const uint s = src + 2u * e;
        K[dst + e] = packHalf2x16(vec2(X[s], X[s + 1u]));
    }
#endif
}
