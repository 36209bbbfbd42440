#version 450
// mul_mat.comp — y[j][r] = dot(W row r, x row j) for a weight W of rows x cols in a ggml block layout (wtype.glsl)
// and F32 activations. One workgroup per (weight row, NC activation rows): each element of W is decoded once and
// used for NC columns, so the same shader is the decode GEMV (n = 1) and a prefill GEMM. Threads split the row's
// blocks; a shared-memory tree sums their partials. Rows past 32768 go to the grid's z dimension.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
const uint NC = 4u;

layout(std430, binding = 0) readonly buffer BW { uint W[]; };
layout(std430, binding = 1) readonly buffer BX { float X[]; };
layout(std430, binding = 2) writeonly buffer BY { float Y[]; };
layout(push_constant) uniform P {
    uint rows, cols, n;      // W is rows x cols; n activation rows
    uint w_off, row_bytes;   // byte offset of W's row 0 in the buffer, bytes per row
    uint x_off, ldx;         // floats
    uint y_off, ldy;
} p;

#include "wtype.glsl"

shared float red[NC * WG];

void main() {
    const uint r = gl_WorkGroupID.x + gl_WorkGroupID.z * 32768u;
    const uint j0 = gl_WorkGroupID.y * NC;
    const uint t = gl_LocalInvocationID.x;
    if (r >= p.rows) return;   // uniform over the workgroup
    const uint nc = min(NC, p.n - j0);
    float acc[NC];
    for (uint c = 0u; c < NC; c++) acc[c] = 0.0;
    const uint nb = p.cols / QK;
    const uint rb = p.w_off + r * p.row_bytes;
    for (uint blk = t; blk < nb; blk += WG) {
        const uint b = rb + blk * QB;
        for (uint e = 0u; e < QK; e++) {
            const float w = welem(b, e);
            const uint col = blk * QK + e;
            for (uint c = 0u; c < nc; c++) acc[c] += w * X[p.x_off + (j0 + c) * p.ldx + col];
        }
    }
    for (uint c = 0u; c < NC; c++) red[c * WG + t] = acc[c];
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (t < s)
            for (uint c = 0u; c < NC; c++) red[c * WG + t] += red[c * WG + t + s];
        barrier();
    }
    if (t == 0u)
        for (uint c = 0u; c < nc; c++) Y[p.y_off + (j0 + c) * p.ldy + r] = red[c * WG];
}
