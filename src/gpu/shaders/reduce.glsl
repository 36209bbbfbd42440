// reduce.glsl — workgroup sum / max over WG threads through shared memory (WG a power of two). Every thread gets
// the result. Needs `shared float red[WG];`.
float wg_sum(float v) {
    const uint t = gl_LocalInvocationID.x;
    barrier();
    red[t] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        barrier();
    }
    return red[0];
}
float wg_max(float v) {
    const uint t = gl_LocalInvocationID.x;
    barrier();
    red[t] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
        if (t < s) red[t] = max(red[t], red[t + s]);
        barrier();
    }
    return red[0];
}
