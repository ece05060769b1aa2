/// A value that is only reachable inside a critical region.
///
/// Why not `Synchronization.Mutex`: on Linux it is built on futexes inside the
/// precompiled standard library, so ThreadSanitizer cannot see its
/// synchronization and reports false races on everything it protects. A
/// pthread mutex is intercepted by ThreadSanitizer and exists on every
/// platform SafeObserve targets. The mutex and the value share one allocation.
///
/// Closure-scoped access only: there is no `lock()` / `unlock()` to misuse.
/// Give it a non-empty `State` (a zero-sized one would share its address with
/// the mutex, which confuses ThreadSanitizer's access tracking).
/// Never call user code, and never release anything whose `deinit` may be
/// user code, inside `body`: return it and drop it after the lock is released.
// @unchecked Sendable: `State` is only touched inside `withLock`, under the
// mutex; every `State` in SafeObserve holds only Sendable values or
// references used for identity and liveness checks.
@usableFromInline struct _Mutex<State>: @unchecked Sendable {
    @usableFromInline
    final class Storage: ManagedBuffer<State, _PlatformMutex> {
        deinit {
            withUnsafeMutablePointerToElements { _platformMutexDestroy($0) }
        }
    }

    @usableFromInline
    let storage: Storage

    init(_ initialState: State) {
        // unsafeDowncast: `create` returns an instance of the class it is called on.
        storage = unsafeDowncast(Storage.create(minimumCapacity: 1) { _ in initialState }, to: Storage.self)
        storage.withUnsafeMutablePointerToElements { _platformMutexInitialize($0) }
    }

    /// Runs `body` with exclusive access to the state.
    ///
    /// - Complexity: O(1) plus `body`.
    @inlinable
    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        try storage.withUnsafeMutablePointers { state, mutex in
            _platformMutexLock(mutex)
            defer { _platformMutexUnlock(mutex) }
            return try body(&state.pointee)
        }
    }
}
