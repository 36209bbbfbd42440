#version 450
// softmax.comp — each row of n in place: e^(x - max) / sum, one workgroup per row.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(std430, binding = 0) buffer BX { float X[]; };
layout(push_constant) uniform P { uint n, rows, ldx; } p;

shared float red[WG];
#include "reduce.glsl"

void main() {
    const uint i = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    if (i >= p.rows) return;
    const uint o = i * p.ldx;
    float m = -1.0 / 0.0;
    for (uint e = t; e < p.n; e += WG) m = max(m, X[o + e]);
    m = wg_max(m);
    float s = 0.0;
    for (uint e = t; e < p.n; e += WG) {
        const float v = exp(X[o + e] - m);
        X[o + e] = v;
        s += v;
    }
    s = wg_sum(s);
    const float inv = 1.0 / s;
    for (uint e = t; e < p.n; e += WG) X[o + e] *= inv;
}
