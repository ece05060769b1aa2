// The runtime declarations are in include/CSafeObserveRuntime.h; this file
// defines the helpers that are not declarations.
#if defined(__linux__)
#define _GNU_SOURCE
#endif
#include "CSafeObserveRuntime.h"

#include <pthread.h>

#if defined(__APPLE__)

static bool isMainThread(void) { return pthread_main_np() != 0; }

#elif defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

/// The main thread, if this library was loaded on it (at process start,
/// unless it was `dlopen`ed from another thread); 0 otherwise.
static pthread_t mainThread;
static bool mainThreadKnown;

__attribute__((constructor)) static void captureMainThread(void) {
    // The main thread's thread ID is the process ID.
    if (syscall(SYS_gettid) == getpid()) {
        mainThread = pthread_self();
        mainThreadKnown = true;
    }
}

static bool isMainThread(void) {
    if (mainThreadKnown) { return pthread_equal(pthread_self(), mainThread); }
    return syscall(SYS_gettid) == getpid();
}

#else
static bool isMainThread(void) { return false; }
#endif

bool csafeobserve_isMainThreadOutsideTasks(void) {
    return isMainThread() && csafeobserve_currentTask() == NULL;
}
