// wtype.glsl — weight rows in ggml's block layouts, read from a uint[] buffer W as the CPU reads the GGUF bytes.
// Include after declaring `uint W[]` (a readonly buffer). One WTYPE_<type> (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) is defined by the build (one SPIR-V module per type). Bytes are addressed in W with
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

#if defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// the 6-bit scale and min of sub-block is (ggml's get_scale_min_k4) from the 12 scale bytes at b + 4
void kscale_min(uint b, uint is, out uint sc, out uint m) {
    if (is < 4u) {
        sc = rd8(b + 4u + is) & 63u;
        m = rd8(b + 8u + is) & 63u;
    } else {
        sc = (rd8(b + 8u + is) & 15u) | ((rd8(b + is) >> 6) << 4);
        m = (rd8(b + 8u + is) >> 4) | ((rd8(b + 4u + is) >> 6) << 4);
    }
}
#endif

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
    kscale_min(b, is, sc, m);
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
#elif defined(WTYPE_BF16)
const uint QK = 1u, QB = 2u;
float welem(uint b, uint e) { return uintBitsToFloat(rd16(b) << 16); }
#elif defined(WTYPE_Q4_1)
// { f16 d; f16 m; uint8 qs[16] }: nibbles as Q4_0; value d * q + m
const uint QK = 32u, QB = 20u;
float welem(uint b, uint e) {
    uint q = rd8(b + 4u + (e & 15u));
    q = e < 16u ? (q & 15u) : (q >> 4);
    return float(q) * rdh(b) + rdh(b + 2u);
}
#elif defined(WTYPE_Q5_0) || defined(WTYPE_Q5_1)
// { f16 d; [f16 m;] uint8 qh[4]; uint8 qs[16] }: low 4 bits as Q4_0's nibbles, bit 4 of element e in bit e of the
// little-endian qh; Q5_0: d * (q - 16), Q5_1: d * q + m
#if defined(WTYPE_Q5_0)
const uint QK = 32u, QB = 22u, Q5H = 2u;
#else
const uint QK = 32u, QB = 24u, Q5H = 4u;
#endif
float welem(uint b, uint e) {
    uint q = rd8(b + Q5H + 4u + (e & 15u));
    q = (e < 16u ? (q & 15u) : (q >> 4)) | (((rd32(b + Q5H) >> e) & 1u) << 4);
#if defined(WTYPE_Q5_0)
    return (float(q) - 16.0) * rdh(b);
#else
    return float(q) * rdh(b) + rdh(b + 2u);
#endif
}
#elif defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS)
// the non-linear 4-bit grid (ggml's kvalues_iq4nl)
const float IQ4V[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0,
                                 53.0, 69.0, 89.0, 113.0);
#if defined(WTYPE_IQ4_NL)
// { f16 d; uint8 qs[16] }: nibbles as Q4_0; value d * grid[q]
const uint QK = 32u, QB = 18u;
float welem(uint b, uint e) {
    uint q = rd8(b + 2u + (e & 15u));
    q = e < 16u ? (q & 15u) : (q >> 4);
    return rdh(b) * IQ4V[q];
}
#else
// { f16 d; uint16 scales_h; uint8 scales_l[4]; uint8 qs[128] }: 8 groups of 32 with a 6-bit scale ls (low 4 bits in
// the nibbles of scales_l, high 2 in scales_h); group g's 16 bytes of qs in Q4_0's nibble order; d * (ls - 32) * grid[q]
const uint QK = 256u, QB = 136u;
float welem(uint b, uint e) {
    uint g = e >> 5, l = e & 31u;
    uint ls = ((rd8(b + 4u + g / 2u) >> (4u * (g & 1u))) & 15u) | (((rd16(b + 2u) >> (2u * g)) & 3u) << 4);
    uint q = rd8(b + 8u + 16u * g + (l & 15u));
    q = l < 16u ? (q & 15u) : (q >> 4);
    return rdh(b) * (float(int(ls) - 32)) * IQ4V[q];
}
#endif
#elif defined(WTYPE_Q2_K) || defined(WTYPE_Q3_K)
// 2-bit codes of Q2_K / Q3_K: byte 32 h + l of qs holds elements 128 h + l + 32 p at bit pair p
uint code2(uint qs, uint e) { return (rd8(qs + 32u * (e >> 7) + (e & 31u)) >> (2u * ((e & 127u) >> 5))) & 3u; }
#if defined(WTYPE_Q2_K)
// { uint8 scales[16]; uint8 qs[64]; f16 d; f16 dmin }: 16 groups of 16; value d * (sc & 15) * q - dmin * (sc >> 4)
const uint QK = 256u, QB = 84u;
float welem(uint b, uint e) {
    uint sc = rd8(b + (e >> 4));
    return rdh(b + 80u) * float(sc & 15u) * float(code2(b + 16u, e)) - rdh(b + 82u) * float(sc >> 4);
}
#else
// { uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; f16 d }: 16 groups of 16; value d * (sc - 32) * (q - 4 + 4 h),
// h = bit e / 32 of hmask[e % 32]; the 6-bit sc of group g: low nibble of byte g (g < 8) or high nibble of byte g - 8,
// top 2 bits in bits 2 (g / 4) of byte 8 + g % 4
const uint QK = 256u, QB = 110u;
float welem(uint b, uint e) {
    uint g = e >> 4;
    uint lo = g < 8u ? (rd8(b + 96u + g) & 15u) : (rd8(b + 96u + g - 8u) >> 4);
    uint sc = lo | (((rd8(b + 104u + (g & 3u)) >> (2u * (g >> 2))) & 3u) << 4);
    uint h = (rd8(b + (e & 31u)) >> (e >> 5)) & 1u;
    return rdh(b + 108u) * float(int(sc) - 32) * float(int(code2(b + 32u, e)) - (h == 1u ? 0 : 4));
}
#endif
#elif defined(WTYPE_Q5_K)
// { f16 d; f16 dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128] }: Q4_K's scales and nibbles plus bit 4 of
// element e (chunk j = e / 64, half hi) in bit 2 j + hi of qh[e % 32]
const uint QK = 256u, QB = 176u;
float welem(uint b, uint e) {
    uint j = e >> 6, hi = (e >> 5) & 1u, l = e & 31u, is = 2u * j + hi;
    uint sc, m;
    kscale_min(b, is, sc, m);
    uint q = rd8(b + 48u + 32u * j + l);
    q = (hi == 0u ? (q & 15u) : (q >> 4)) | (((rd8(b + 16u + l) >> is) & 1u) << 4);
    return rdh(b) * float(sc) * float(q) - rdh(b + 2u) * float(m);
}
#else
#error "wtype.glsl: no WTYPE_* defined"
#endif
