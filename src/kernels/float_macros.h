/* float_macros.h — inlining and unrolling macros of the float vector layers (kernels/x86/float_x86.h,
 * kernels/arm/float_arm.h) and their templates (kernels/float_tmpl.h). */
#ifndef RP_KERNELS_FLOAT_MACROS_H
#define RP_KERNELS_FLOAT_MACROS_H

#define RP_FX_INLINE static inline __attribute__((always_inline))
/* Every loop over a register array is fully unrolled (gcc -O2 does not do it
 * on its own), so the arrays become registers instead of stack slots. */
#define FX_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define FX_UNROLL(n) FX_PRAGMA(unroll)
#else
#define FX_UNROLL(n) FX_PRAGMA(GCC unroll n)
#endif
/* for (i = 0; i < N; i++) where N <= MAX is a constant only after inlining:
 * the loop runs to the literal MAX with a guard, so the generic body already
 * unrolls and keeps its arrays in registers (clang simplifies an always_inline
 * callee before inlining it; a loop to N would stay a loop there). */
#define FX_FOR(i, MAX, N) FX_UNROLL(MAX) for (int i = 0; i < (MAX); i++) if (i < (N))

#endif /* RP_KERNELS_FLOAT_MACROS_H */
