// The Swift and Objective-C runtime entry points SafeObserve calls, declared
// here so that they are linked directly: with a static standard library
// (`--static-swift-stdlib`, `-static-executable`) the runtime's symbols are not
// exported to `dlsym`, but the static linker resolves these declarations.
//
// What SafeObserve relies on, and how a change would be noticed:
// - The two Swift functions are declared with `SWIFT_RUNTIME_EXPORT` in the
//   runtime's `swift/Runtime/HeapObject.h`, with these C signatures, and have
//   been since Swift 4; the stdlib's own `_getUnownedRetainCount` family and
//   several open-source packages link them the same way. They are not part of
//   the documented language ABI: a runtime that dropped or renamed one would
//   fail to link (an error at build time, never a crash at run time), and the
//   test suite exercises both on every platform it builds.
// - `swift_isDeallocating` answers whether the object's strong count reached
//   zero (its deinit started); `swift_tryRetain` retains the object unless it
//   did, returning it (+1) or NULL. Both are atomic and never trap.
#ifndef CSAFEOBSERVE_RUNTIME_H
#define CSAFEOBSERVE_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/// `bool swift_isDeallocating(HeapObject *)`.
bool swift_isDeallocating(void *_Nonnull object);

/// `HeapObject *swift_tryRetain(HeapObject *)`.
void *_Nullable swift_tryRetain(void *_Nonnull object);

// Whether the calling thread is running on a serial executor, which the
// Concurrency runtime answers for `Actor.assumeIsolated` (inlined into every
// client that calls it, so its entry points are part of the runtime's ABI).
// - Declared with the runtime's calling convention (`SWIFT_CC(swift)`, clang's
//   `swiftcall`). A `SerialExecutorRef` (an identity pointer and an
//   implementation word, `UnownedSerialExecutor` in Swift) is passed as its
//   two words and returned in two registers, which is how `swiftcall` passes
//   and returns that struct.
// - `swift_task_isCurrentExecutorWithFlags` (Swift 6.2 runtimes) with no
//   flags answers false when the executor is another one. Older runtimes have
//   only `swift_task_isCurrentExecutor`, which may trap instead (it asks the
//   executor's `checkIsolated()`), so there the identity of the executor the
//   thread runs is compared, which never traps and is exact for default
//   actors (a custom executor recognised only by its own check answers
//   false: its changes then hop, later but in order). The new entry point is
//   weakly linked (NULL on an older runtime).
#if defined(__APPLE__)
#define CSAFEOBSERVE_SYMBOL(name) __asm__("_" #name)
#else
#define CSAFEOBSERVE_SYMBOL(name) __asm__(#name)
#endif

typedef struct {
    void *_Nullable identity;
    uintptr_t implementation;
} CSafeObserveExecutorRef;

__attribute__((swiftcall, weak)) bool csafeobserve_isCurrentExecutorWithFlags(
    void *_Nullable identity, uintptr_t implementation, uint64_t flags)
    CSAFEOBSERVE_SYMBOL(swift_task_isCurrentExecutorWithFlags);

/// `SerialExecutorRef swift_task_getCurrentExecutor(void)`: the executor the
/// thread runs (the generic executor, identity NULL, outside any task).
__attribute__((swiftcall)) CSafeObserveExecutorRef csafeobserve_currentExecutor(void)
    CSAFEOBSERVE_SYMBOL(swift_task_getCurrentExecutor);

/// `AsyncTask *swift_task_getCurrent(void)`: the task the thread runs, or
/// NULL outside any task.
__attribute__((swiftcall)) void *_Nullable csafeobserve_currentTask(void)
    CSAFEOBSERVE_SYMBOL(swift_task_getCurrent);

/// Whether the thread runs a task's job on no serial executor (a nonisolated
/// task on the global executor): such a job is never isolated to the main
/// actor, whatever the runtime would be asked (two thread-local reads).
static inline bool csafeobserve_isOnGenericExecutorInTask(void) {
    return csafeobserve_currentExecutor().identity == NULL && csafeobserve_currentTask() != NULL;
}

/// Whether the thread runs on the executor made of these two words, by
/// identity (what older runtimes can answer without trapping).
static inline bool csafeobserve_isCurrentExecutorByIdentity(void *_Nullable identity) {
    CSafeObserveExecutorRef current = csafeobserve_currentExecutor();
    return identity != NULL && current.identity == identity;
}

/// Whether the calling thread runs on the serial executor made of these two
/// words (an `UnownedSerialExecutor`); never traps.
static inline bool csafeobserve_isCurrentExecutor(void *_Nullable identity, uintptr_t implementation) {
    if (csafeobserve_isCurrentExecutorWithFlags) {
        return csafeobserve_isCurrentExecutorWithFlags(identity, implementation, 0);
    }
    return csafeobserve_isCurrentExecutorByIdentity(identity);
}

#if defined(__linux__)
/// 1 on the main thread, set by the library's constructor when it runs there
/// (at process start, unless the library is `dlopen`ed from another thread);
/// 0 elsewhere. Initial-exec TLS: one load, no call.
extern __thread unsigned char csafeobserve_onMainThread __attribute__((tls_model("initial-exec")));

/// Whether the calling thread is the process's main thread, which never runs
/// concurrently with a main-actor job. `false` where unknown.
static inline bool csafeobserve_isMainThread(void) { return csafeobserve_onMainThread != 0; }
#else
/// Whether the calling thread is the process's main thread, which never runs
/// concurrently with a main-actor job. `false` where unknown.
bool csafeobserve_isMainThread(void);
#endif

#if defined(__APPLE__)
/// Whether instances of `cls` use Swift's native reference counting (not
/// NSObject's): `swift/Runtime/Metadata.h`, exported on Objective-C platforms.
bool swift_objc_class_usesNativeSwiftReferenceCounting(const void *_Nonnull cls);

/// Objective-C weak references that never trap. `objc_initWeak` traps when its
/// object is deallocating ("Cannot form weak reference to instance ... in the
/// process of deallocation"); the `OrNil` variant stores nil instead. Exported
/// by libobjc (objc-internal.h) since macOS 10.11 / iOS 9.
void *_Nullable objc_initWeakOrNil(void *_Nullable *_Nonnull location, void *_Nullable object);
void *_Nullable objc_loadWeakRetained(void *_Nullable *_Nonnull location);
void objc_destroyWeak(void *_Nullable *_Nonnull location);
void objc_release(void *_Nullable object);
#endif

#endif
