/* busy.c — the competing process of `bench model --busy N`. */
#include "busy.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void *spin(void *arg) {
    volatile uint64_t x = (uint64_t)(uintptr_t)arg | 1u;
    for (;;) x = x * 6364136223846793005ull + 1442695040888963407ull;
    return NULL;
}

pid_t bench_busy_start(int n_threads) {
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid != 0) return pid;   /* the parent (or -1) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);   /* the parent died before the line above */
    for (int i = 1; i < n_threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, spin, (void *)(uintptr_t)i) != 0) break;
    }
    spin(NULL);
    _exit(0);
}

void bench_busy_stop(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}
