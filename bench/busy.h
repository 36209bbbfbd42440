/* busy.h — a competing process for contention benchmarks: N threads that spin until stopped. */
#ifndef RP_BENCH_BUSY_H
#define RP_BENCH_BUSY_H

#include <sys/types.h>

/* Forks a process running n_threads spinning threads (integer work, no memory traffic beyond L1), as another
 * program on the machine would; it dies with this process. Returns its pid, or -1 (errno set). */
pid_t bench_busy_start(int n_threads);
/* Kills and reaps it (no-op for pid <= 0). */
void bench_busy_stop(pid_t pid);

#endif
