// The runtime declarations are in include/CSafeObserveRuntime.h; this file
// defines the helpers that are not declarations.
#if defined(__linux__)
#define _GNU_SOURCE
#endif
#include "CSafeObserveRuntime.h"

#include <pthread.h>

#if defined(__APPLE__)

bool csafeobserve_isMainThread(void) { return pthread_main_np() != 0; }

#elif defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

__thread unsigned char csafeobserve_onMainThread __attribute__((tls_model("initial-exec")));

__attribute__((constructor)) static void captureMainThread(void) {
    // The main thread's thread ID is the process ID.
    if (syscall(SYS_gettid) == getpid()) { csafeobserve_onMainThread = 1; }
}

#else
bool csafeobserve_isMainThread(void) { return false; }
#endif
