/* matmul.h — the matmul driver: picks a kernel per weight, packs it once, runs it over the thread pool. */
#ifndef RP_KERNELS_MATMUL_H
#define RP_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "reprise.h"
#include "core/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/types.h"

/* A 2-D weight [rows x cols] (GGUF ne0 = cols, contiguous; ne1 = rows). */
typedef struct rp_weight {
    const void *data;          /* GGUF rows in the mapping */
    rp_type type;
    int64_t rows, cols;
    size_t row_bytes;          /* GGUF row stride */
    const rp_mm_kernel *k;     /* chosen at prepare */
    void *packed;              /* owned; NULL when the kernel reads GGUF rows */
    size_t packed_bytes;
} rp_weight;

/* Chooses the kernel for `level` and packs the weight into its layout (in
 * parallel over the pool). The packed copy lives on 2 MiB pages where the OS
 * allows (core/bigmem.h: fewer TLB misses while decode streams it). After
 * packing, the source pages of the mapping are released (madvise), so the
 * process does not hold two copies. */
rp_status rp_weight_prepare(rp_weight *w, rp_cpu_level level, rp_pool *pool, bool release_source);
/* The same with a given kernel of w->type (one of rp_mm_kernel_list's; the
 * caller checks the CPU has its level): the kernel micro-benchmarks compare
 * every registered kernel of a type in one run. */
rp_status rp_weight_prepare_with(rp_weight *w, const rp_mm_kernel *k, rp_pool *pool, bool release_source);
void rp_weight_release(rp_weight *w);

/* Scratch a context keeps for matmuls: one activation buffer shared by all
 * threads and one buffer per thread. Sized once by rp_mm_scratch_reserve. */
typedef struct rp_mm_scratch {
    uint8_t *act;
    size_t act_cap;
    void **thr;
    size_t thr_cap;
    int n_threads;
} rp_mm_scratch;

/* Grows the scratch (only at setup, never on the token path) to fit weight W
 * with up to n activation rows. */
rp_status rp_mm_scratch_reserve(rp_mm_scratch *s, int n_threads, const rp_weight *W, int64_t n);
void rp_mm_scratch_free(rp_mm_scratch *s);

/* Quantizes n rows of x (ldx floats apart) into s->act in W's activation
 * format; returns the row stride in bytes. Parallel over rows. */
size_t rp_mm_quantize(rp_pool *pool, const rp_weight *W, const float *x, int64_t n, int64_t ldx, rp_mm_scratch *s);

/* y = act · Wᵀ for rows [r0, r1) of W, from activations already in s->act. */
void rp_mm_run(rp_pool *pool, const rp_weight *W, int64_t r0, int64_t r1, int64_t n, size_t act_stride, float *y,
               int64_t ldy, rp_mm_scratch *s);

/* Several weights over the same activations (s->act, as rp_mm_quantize left
 * it; every pair must satisfy rp_mm_same_act) in one parallel loop: y[i] =
 * act · W[i]ᵀ over all rows of W[i], ldy[i] apart. Why: decode runs q, k and
 * v (and gate, up) back to back; one loop instead of three saves two
 * wake-up/join rounds per group and balances the threads over the sum of
 * the rows (k and v alone are only a few claims each). Results equal
 * separate rp_mm_run calls bit for bit. nw <= RP_MM_MULTI_MAX. */
#define RP_MM_MULTI_MAX 4
void rp_mm_run_multi(rp_pool *pool, const rp_weight *const *W, int nw, int64_t n, size_t act_stride, float *const *y,
                     const int64_t *ldy, rp_mm_scratch *s);

/* Both steps. */
void rp_matmul(rp_pool *pool, const rp_weight *W, const float *x, int64_t n, int64_t ldx, float *y, int64_t ldy,
               rp_mm_scratch *s);

/* True if two weights consume identical activations (one quantization serves both). */
static inline bool rp_mm_same_act(const rp_weight *a, const rp_weight *b) {
    return a->k->quant_act == b->k->quant_act && a->k->act_row_size == b->k->act_row_size && a->cols == b->cols;
}

#endif /* RP_KERNELS_MATMUL_H */
