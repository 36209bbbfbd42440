#version 450
// get_rows.comp — embedding lookup: out row i = W row ids[i], dequantized to F32 (wtype.glsl). One workgroup per id.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;

layout(std430, binding = 0) readonly buffer BW { uint W[]; };
layout(std430, binding = 1) readonly buffer BI { int ids[]; };
layout(std430, binding = 2) writeonly buffer BY { float Y[]; };
layout(push_constant) uniform P {
    uint n, cols;            // ids, elements per row
    uint w_off, row_bytes;
    uint y_off, ldy;
} p;

#include "wtype.glsl"

void main() {
    const uint i = gl_WorkGroupID.x;
    if (i >= p.n) return;
    const uint rb = p.w_off + uint(ids[i]) * p.row_bytes;
    for (uint c = gl_LocalInvocationID.x; c < p.cols; c += WG)
        Y[p.y_off + i * p.ldy + c] = welem(rb + (c / QK) * QB, c % QK);
}
