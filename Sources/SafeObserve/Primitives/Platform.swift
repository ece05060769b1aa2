// Every call into the C library lives in this file, and every call into the
// Swift runtime in Runtime.swift (with the declarations of the runtime's
// entry points in the CSafeObserveRuntime target), so that porting
// SafeObserve to another platform means reading two pages.

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
    import os  // os_unfair_lock
#elseif canImport(Android)
    import Android
#endif

/// A per-thread slot holding one raw pointer, backed by a pthread key.
///
/// Only registration uses it (to find the tracker of the key path being
/// resolved on this thread), so its cost never reaches the property setters.
struct _ThreadLocalPointer: ~Copyable, @unchecked Sendable {
    // @unchecked Sendable: a pthread key is an immutable process-wide handle;
    // every thread reads and writes only its own slot through it.
    private let key: pthread_key_t

    init() {
        var key = pthread_key_t()
        let status = pthread_key_create(&key, nil)
        precondition(status == 0, "SafeObserve: pthread_key_create failed (\(status))")
        self.key = key
    }

    var value: UnsafeMutableRawPointer? {
        get { pthread_getspecific(key) }
        nonmutating set { _ = pthread_setspecific(key, newValue) }
    }
}

/// The calling thread's identity (for values that wait for a change on the
/// same thread).
@usableFromInline
func _currentThreadID() -> UInt {
    #if canImport(Darwin)
        return UInt(bitPattern: pthread_self())
    #else
        return UInt(pthread_self())
    #endif
}

/// What a thread made by ``_detachThread(_:)`` runs.
private final class _ThreadBody: Sendable {
    let run: @Sendable () -> Void
    init(_ run: @escaping @Sendable () -> Void) { self.run = run }
}

/// Runs `body` on a thread of its own, detached (it ends when `body`
/// returns): for work that must not wait for a thread of the cooperative
/// pool, which the program may keep busy.
func _detachThread(_ body: @escaping @Sendable () -> Void) {
    // Unmanaged: +1 handed to the thread, balanced by takeRetainedValue() there.
    let context = Unmanaged.passRetained(_ThreadBody(body)).toOpaque()
    #if canImport(Darwin)
        var thread: pthread_t?
    #else
        var thread = pthread_t()
    #endif
    let status = pthread_create(
        &thread, nil,
        { context in
            // Unmanaged: balances the passRetained above.
            Unmanaged<_ThreadBody>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
    precondition(status == 0, "SafeObserve: pthread_create failed (\(status))")
    #if canImport(Darwin)
        pthread_detach(thread!)
    #else
        pthread_detach(thread)
    #endif
}

/// Suspends the calling thread for `milliseconds`.
func _sleep(milliseconds: Int) {
    var duration = timespec(tv_sec: milliseconds / 1_000, tv_nsec: (milliseconds % 1_000) * 1_000_000)
    var remaining = timespec()
    // Interrupted by a signal: sleep for the rest.
    while nanosleep(&duration, &remaining) != 0 { duration = remaining }
}

/// Writes a line to standard error (diagnostics of release builds).
func _writeToStandardError(_ message: String) {
    var line = message
    line.append("\n")
    line.withUTF8 { bytes in
        _ = write(2, bytes.baseAddress, bytes.count)
    }
}

// MARK: - Apple platforms' lock

#if canImport(Darwin)
    /// An `os_unfair_lock` at a stable address (a lock must never move).
    @usableFromInline
    // @unchecked Sendable: an immutable pointer to a lock made for concurrent use.
    struct _PlatformUnfairLock: @unchecked Sendable {
        @usableFromInline
        let pointer: UnsafeMutablePointer<os_unfair_lock>

        init() {
            pointer = .allocate(capacity: 1)
            pointer.initialize(to: os_unfair_lock())
        }

        /// Frees the lock (its owner's `deinit`; nobody holds or waits for it).
        func deallocate() {
            pointer.deinitialize(count: 1)
            pointer.deallocate()
        }

        @inlinable @inline(__always)
        func lock() { os_unfair_lock_lock(pointer) }

        @inlinable @inline(__always)
        func unlock() { os_unfair_lock_unlock(pointer) }
    }
#endif

// MARK: - Parking primitives (the slow path of `_Mutex` off Apple platforms)

/// The platform mutex of a ``_ParkingLot`` bucket.
typealias _PlatformMutex = pthread_mutex_t

/// The platform condition variable of a ``_ParkingLot`` bucket.
typealias _PlatformCondition = pthread_cond_t

func _platformMutexInitialize(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_init(mutex, nil)
    precondition(status == 0, "SafeObserve: pthread_mutex_init failed (\(status))")
}

func _platformMutexLock(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_lock(mutex)
    assert(status == 0, "SafeObserve: pthread_mutex_lock failed (\(status))")
}

func _platformMutexUnlock(_ mutex: UnsafeMutablePointer<_PlatformMutex>) {
    let status = pthread_mutex_unlock(mutex)
    assert(status == 0, "SafeObserve: pthread_mutex_unlock failed (\(status))")
}

func _platformConditionInitialize(_ condition: UnsafeMutablePointer<_PlatformCondition>) {
    let status = pthread_cond_init(condition, nil)
    precondition(status == 0, "SafeObserve: pthread_cond_init failed (\(status))")
}

/// Waits on `condition`; `mutex` must be held, and is held again on return.
func _platformConditionWait(
    _ condition: UnsafeMutablePointer<_PlatformCondition>, _ mutex: UnsafeMutablePointer<_PlatformMutex>
) {
    let status = pthread_cond_wait(condition, mutex)
    assert(status == 0, "SafeObserve: pthread_cond_wait failed (\(status))")
}

func _platformConditionBroadcast(_ condition: UnsafeMutablePointer<_PlatformCondition>) {
    let status = pthread_cond_broadcast(condition)
    assert(status == 0, "SafeObserve: pthread_cond_broadcast failed (\(status))")
}
