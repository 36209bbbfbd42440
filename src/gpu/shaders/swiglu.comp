#version 450
// swiglu.comp — g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + e^-x), for i < n.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(std430, binding = 0) buffer BG { float G[]; };
layout(std430, binding = 1) readonly buffer BU { float U[]; };
layout(push_constant) uniform P { uint n; } p;

void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
    if (i >= p.n) return;
    const float x = G[i];
    G[i] = x / (1.0 + exp(-x)) * U[i];
}
