#version 450
// rmsnorm.comp — out row = x row / sqrt(mean(x^2) + eps) * w, one workgroup per row (out may alias x: pass the
// same buffer twice). With ADD (spec constant 1): x += r first (the residual add the forward does before a norm),
// x written back.
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const bool ADD = false;

layout(std430, binding = 0) buffer BX { float X[]; };
layout(std430, binding = 1) readonly buffer BW { float Wn[]; };
layout(std430, binding = 2) buffer BO { float O[]; };
layout(std430, binding = 3) readonly buffer BR { float R[]; };
layout(push_constant) uniform P { uint n, rows, ldx, ldo; float eps; } p;

shared float red[WG];
#include "reduce.glsl"

void main() {
    const uint i = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
    if (i >= p.rows) return;
    float ss = 0.0;
    for (uint e = t; e < p.n; e += WG) {
        float v = X[i * p.ldx + e];
        if (ADD) {
            v += R[i * p.ldx + e];
            X[i * p.ldx + e] = v;
        }
        ss += v * v;
    }
    ss = wg_sum(ss);
    const float scale = 1.0 / sqrt(ss / float(p.n) + p.eps);
    for (uint e = t; e < p.n; e += WG) O[i * p.ldo + e] = X[i * p.ldx + e] * scale * Wn[e];
}
