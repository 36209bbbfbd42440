#version 450
// rope.comp — rotates the first n_rot dims of every head of each row in place by the row's table (cos[n_rot/2] |
// sin[n_rot/2], the CPU's rope_cs layout: frequency scaling, llama3's included, is folded into it at load).
// NORM pairs (2i, 2i+1), NEOX (spec constant 1) pairs (i, i + n_rot/2). One workgroup per row.
layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG = 64;
layout(constant_id = 1) const bool NEOX = false;

layout(std430, binding = 0) buffer BX { float X[]; };
layout(std430, binding = 1) readonly buffer BC { float CS[]; };
layout(push_constant) uniform P { uint rows, n_heads, head_dim, n_rot, ldx, x_off; } p;

void main() {
    const uint i = gl_WorkGroupID.x;
    if (i >= p.rows) return;
    const uint half_ = p.n_rot / 2u;
    for (uint k = gl_LocalInvocationID.x; k < p.n_heads * half_; k += WG) {
        const uint h = k / half_, f = k % half_;
        const uint base = p.x_off + i * p.ldx + h * p.head_dim;
        const uint ia = NEOX ? base + f : base + 2u * f;
        const uint ib = NEOX ? base + f + half_ : base + 2u * f + 1u;
        const float c = CS[i * p.n_rot + f], s = CS[i * p.n_rot + half_ + f];
        const float a = X[ia], b = X[ib];
        X[ia] = a * c - b * s;
        X[ib] = a * s + b * c;
    }
}
