#version 450
// kv_store_f16.comp — KV cache write: F32 row i of n (kd floats, kd even) into cell cells[i] of an F16 cache
// (kd halves per cell), round to nearest even. Thread per pair of halves. Rows r0 + i of X and cells (a run of a
// multi-sequence batch whose sequence owns the cache).
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(std430, binding = 0) readonly buffer BX { float X[]; };
layout(std430, binding = 1) readonly buffer BI { int cells[]; };
layout(std430, binding = 2) buffer BK { uint K[]; };
layout(push_constant) uniform P { uint n, kd, ldx, x_off, k_off, r0; } p;   // k_off in halves (even)

void main() {
    if (gl_WorkGroupID.x >= p.n) return;
    const uint i = p.r0 + gl_WorkGroupID.x;
    const uint dst = (p.k_off + uint(cells[i]) * p.kd) / 2u;
    for (uint e = gl_LocalInvocationID.x; e < p.kd / 2u; e += WG) {
        const uint s = p.x_off + i * p.ldx + 2u * e;
        K[dst + e] = packHalf2x16(vec2(X[s], X[s + 1u]));
    }
}
