/* bigmem.h — large, long-lived buffers (packed weights) backed by 2 MiB transparent huge pages where the OS allows. */
#ifndef RP_CORE_BIGMEM_H
#define RP_CORE_BIGMEM_H

#include <stdbool.h>
#include <stddef.h>

/* Why: decode streams every weight byte once per token. With 4 KiB pages
 * that is one TLB miss (and a page walk the hardware prefetchers cannot run
 * ahead of) every 64 cache lines; 2 MiB pages remove nearly all of them.
 * Linux with transparent_hugepage=madvise (Debian's default) only backs a
 * region with huge pages when asked, so big buffers are mapped 2 MiB-aligned
 * and madvise(MADV_HUGEPAGE)d before they are first written.
 *
 * Contract: returns a 64-byte-aligned (2 MiB-aligned when bytes >=
 * RP_BIGMEM_MIN) buffer of at least `bytes` bytes, or NULL. It must be freed
 * with rp_bigmem_free(p, bytes) with the same `bytes`. Smaller requests and
 * RP_NO_HUGEPAGES=1 use aligned_alloc (the A/B switch for benchmarks). Not
 * for the token path: it maps memory. */
#define RP_BIGMEM_MIN ((size_t)1 << 20)

void *rp_bigmem_alloc(size_t bytes);
void rp_bigmem_free(void *p, size_t bytes);

/* False when RP_NO_HUGEPAGES=1 turned the huge-page path off. */
bool rp_bigmem_huge_enabled(void);

/* The kernel's transparent huge page mode ("always", "madvise", "never"),
 * copied into buf; "unknown" when /sys does not say. Returns buf. */
const char *rp_bigmem_thp_mode(char *buf, size_t n);

/* Bytes of the process currently backed by huge pages (AnonHugePages in
 * /proc/self/smaps_rollup), or -1 when the kernel does not report it. */
long long rp_bigmem_huge_bytes(void);

/* The process's resident set (VmRSS in /proc/self/status) in bytes, or -1
 * when the kernel does not report it. For memory-budget checks. */
long long rp_bigmem_rss_bytes(void);

#endif /* RP_CORE_BIGMEM_H */
