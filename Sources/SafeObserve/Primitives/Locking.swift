import Synchronization

/// A value that is only reachable inside a critical region.
///
/// Closure-scoped access only: there is no `lock()` / `unlock()` to misuse.
/// Never call user code, and never release anything whose `deinit` may be
/// user code, inside `body`: return it and drop it after the lock is released.
///
/// Why not `Synchronization.Mutex`: on Linux its lock and unlock live in the
/// precompiled standard library, so ThreadSanitizer cannot see their
/// synchronization and reports false races on everything it protects. Why not
/// a bare `pthread_mutex_t`: an uncontended lock and unlock cost about 55
/// instructions, the largest single cost of delivering a change. So this is a
/// word lock: an uncontended lock is one compare-and-swap and an unlock one
/// exchange (about 6 instructions), both compiled into this module, where
/// ThreadSanitizer instruments their acquire/release ordering. A contended
/// lock spins briefly, then parks on a ``_ParkingLot`` bucket (a pthread mutex
/// and condition variable), so waiting never burns a core.
@usableFromInline struct _Mutex<State>: Sendable {
    @usableFromInline
    let storage: _LockedStorage<State>

    init(_ initialState: State) {
        storage = _LockedStorage(initialState)
    }

    /// Runs `body` with exclusive access to the state.
    ///
    /// - Complexity: O(1) plus `body`.
    @inlinable
    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        storage.lock()
        defer { storage.unlock() }
        return try body(&storage.state)
    }
}

extension _LockedStorage {
    /// Runs `body` with exclusive access to the state: for an object that
    /// is its own lock storage (a subclass), sparing a second allocation.
    ///
    /// - Complexity: O(1) plus `body`.
    @inlinable
    final func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        lock()
        defer { unlock() }
        return try body(&state)
    }
}

// The lock and the state it guards, in one allocation. Every `State` in
// SafeObserve holds only Sendable values or references used for identity and
// liveness checks.
#if canImport(Darwin)
    /// Apple platforms: an `os_unfair_lock`, which donates the waiting
    /// thread's priority to the owner (as Observation's locks do), so a
    /// main-thread change never waits behind a background thread at low
    /// priority. The word lock below cannot donate priority.
    @usableFromInline
    // @unchecked Sendable: `state` is only touched between `lock()` and `unlock()`.
    class _LockedStorage<State>: @unchecked Sendable {
        /// The lock, at an address that never moves (allocated once).
        @usableFromInline
        final let unfairLock = _PlatformUnfairLock()

        /// Guarded by `unfairLock`.
        // @exclusivity(unchecked): the lock already makes every access exclusive.
        @exclusivity(unchecked) @usableFromInline
        final var state: State

        init(_ state: State) {
            self.state = state
        }

        deinit {
            unfairLock.deallocate()
        }

        @inlinable @inline(__always)
        final func lock() { unfairLock.lock() }

        @inlinable @inline(__always)
        final func unlock() { unfairLock.unlock() }
    }
#else
    /// The lock word and the state it guards.
    @usableFromInline
    // @unchecked Sendable: `state` is only touched between `lock()` and `unlock()`.
    class _LockedStorage<State>: @unchecked Sendable {
        /// 0: unlocked; 1: locked; 2: locked, and a thread may be parked waiting.
        @usableFromInline
        final let word = Atomic<UInt32>(0)

        /// Guarded by `word`.
        // @exclusivity(unchecked): the lock already makes every access exclusive;
        // the dynamic check would cost more than the lock itself.
        @exclusivity(unchecked) @usableFromInline
        final var state: State

        init(_ state: State) {
            self.state = state
        }

        @inlinable @inline(__always)
        final func lock() {
            if word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged { return }
            lockContended()
        }

        @inlinable @inline(__always)
        final func unlock() {
            if word.exchange(0, ordering: .releasing) == 2 { unlockContended() }
        }

        @usableFromInline @inline(never)
        final func lockContended() {
            // Critical sections are a few dozen instructions: spin a little first.
            for _ in 0..<64 {
                if word.load(ordering: .relaxed) == 0,
                    word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged
                {
                    return
                }
            }
            // Park. Marking the word 2 under the bucket's mutex, and waiting on its
            // condition while holding that mutex, means an unlock that sees 2 can
            // only broadcast once this thread waits: no wakeup is lost.
            _ParkingLot.withBucket(for: self) { bucket in
                while word.exchange(2, ordering: .acquiring) != 0 {
                    bucket.wait()
                }
            }
        }

        @usableFromInline @inline(never)
        final func unlockContended() {
            _ParkingLot.withBucket(for: self) { bucket in bucket.broadcast() }
        }
    }

#endif

/// Where threads wait for a contended ``_Mutex``: a fixed set of buckets, each
/// a pthread mutex and condition variable, chosen by the lock's address.
///
/// Waiters of different locks may share a bucket; a broadcast wakes them all
/// and each re-checks its own lock word. Contention on SafeObserve's locks is
/// brief and rare, so sharing costs nothing measurable and saves a mutex and
/// a condition variable per lock.
enum _ParkingLot {
    struct Bucket {
        let mutex: UnsafeMutablePointer<_PlatformMutex>
        let condition: UnsafeMutablePointer<_PlatformCondition>

        func wait() { _platformConditionWait(condition, mutex) }
        func broadcast() { _platformConditionBroadcast(condition) }
    }

    private static let count = 16

    /// Allocated once, never freed (process lifetime).
    // nonisolated(unsafe): written once by the lazy global initializer (which
    // Swift runs exactly once, thread-safely); only read afterwards.
    private nonisolated(unsafe) static let buckets: UnsafeMutablePointer<Bucket> = {
        let buckets = UnsafeMutablePointer<Bucket>.allocate(capacity: count)
        for index in 0..<count {
            let mutex = UnsafeMutablePointer<_PlatformMutex>.allocate(capacity: 1)
            let condition = UnsafeMutablePointer<_PlatformCondition>.allocate(capacity: 1)
            _platformMutexInitialize(mutex)
            _platformConditionInitialize(condition)
            (buckets + index).initialize(to: Bucket(mutex: mutex, condition: condition))
        }
        return buckets
    }()

    static func withBucket<Result>(for lock: AnyObject, _ body: (Bucket) -> Result) -> Result {
        let address = UInt(bitPattern: ObjectIdentifier(lock))
        let bucket = buckets[Int((address >> 4) % UInt(count))]
        _platformMutexLock(bucket.mutex)
        defer { _platformMutexUnlock(bucket.mutex) }
        return body(bucket)
    }
}
