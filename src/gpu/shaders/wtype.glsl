// wtype.glsl — weight rows in ggml's block layouts, read from a uint[] buffer W as the CPU reads the GGUF bytes.
// Include after declaring `uint W[]` (a readonly buffer). One of WTYPE_F32, WTYPE_F16, WTYPE_Q8_0, WTYPE_Q4_0,
// WTYPE_Q4_K, WTYPE_Q6_K is defined by the build (one SPIR-V module per type). Bytes are addressed in W with
// plain 32-bit words, so no 8/16-bit storage feature is needed; every block starts at an even byte.
//   QK: elements per block, QB: bytes per block, welem(b, e): element e of the block at byte b.
uint rd8(uint b) { return (W[b >> 2] >> ((b & 3u) * 8u)) & 0xFFu; }
uint rd16(uint b) { return (W[b >> 2] >> ((b & 2u) * 8u)) & 0xFFFFu; }   // b even
uint rd32(uint b) {   // any byte offset (an F32 matrix may start at an even, not word-aligned, offset)
    const uint s = (b & 3u) * 8u, lo = W[b >> 2];
    return s == 0u ? lo : (lo >> s) | (W[(b >> 2) + 1u] << (32u - s));
}
float rdh(uint b) { return unpackHalf2x16(rd16(b)).x; }
int s8(uint v) { return int(v) - int((v & 0x80u) << 1); }

#if defined(WTYPE_F32)
const uint QK = 1u, QB = 4u;
float welem(uint b, uint e) { return uintBitsToFloat(rd32(b)); }
#elif defined(WTYPE_F16)
const uint QK = 1u, QB = 2u;
float welem(uint b, uint e) { return rdh(b); }
#elif defined(WTYPE_Q8_0)
// { f16 d; int8 qs[32] }: d * qs[e]
const uint QK = 32u, QB = 34u;
float welem(uint b, uint e) { return rdh(b) * float(s8(rd8(b + 2u + e))); }
#elif defined(WTYPE_Q4_0)
// { f16 d; uint8 qs[16] }: element e < 16 is the low nibble of qs[e], e >= 16 the high nibble of qs[e - 16];
// value d * (q - 8)
const uint QK = 32u, QB = 18u;
float welem(uint b, uint e) {
    uint q = rd8(b + 2u + (e & 15u));
    q = e < 16u ? (q & 15u) : (q >> 4);
    return rdh(b) * (float(q) - 8.0);
}
#elif defined(WTYPE_Q4_K)
// { f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128] }: 8 sub-blocks of 32 with 6-bit scale / min
// (get_scale_min_k4); element e: chunk j = e / 64 of qs[32 j ..], low nibbles for the first 32, high for the next
const uint QK = 256u, QB = 144u;
float welem(uint b, uint e) {
    uint j = e >> 6, hi = (e >> 5) & 1u, l = e & 31u, is = 2u * j + hi;
    uint sc, m;
    if (is < 4u) {
        sc = rd8(b + 4u + is) & 63u;
        m = rd8(b + 8u + is) & 63u;
    } else {
        sc = (rd8(b + 8u + is) & 15u) | ((rd8(b + is) >> 6) << 4);
        m = (rd8(b + 8u + is) >> 4) | ((rd8(b + 4u + is) >> 6) << 4);
    }
    uint q = rd8(b + 16u + 32u * j + l);
    q = hi == 0u ? (q & 15u) : (q >> 4);
    return rdh(b) * float(sc) * float(q) - rdh(b + 2u) * float(m);
}
#elif defined(WTYPE_Q6_K)
// { uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d }: two halves of 128; in a half, group g = r / 32 of l
// takes ql[64 n + l + 32 (g & 1)] (low nibble for g < 2, high for g >= 2) and bits 2g.. of qh[32 n + l]
const uint QK = 256u, QB = 210u;
float welem(uint b, uint e) {
    uint n = e >> 7, r = e & 127u, g = r >> 5, l = r & 31u;
    uint ql = rd8(b + 64u * n + l + 32u * (g & 1u));
    ql = g < 2u ? (ql & 15u) : (ql >> 4);
    uint qh = (rd8(b + 128u + 32u * n + l) >> (2u * g)) & 3u;
    int q = int(ql | (qh << 4)) - 32;
    int sc = s8(rd8(b + 192u + 8u * n + l / 16u + 2u * g));
    return rdh(b + 208u) * float(sc) * float(q);
}
#else
#error "wtype.glsl: no WTYPE_* defined"
#endif
