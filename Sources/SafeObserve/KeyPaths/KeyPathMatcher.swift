/// Decides whether key paths equal one given key path, calling `==` only
/// outside locks.
///
/// `AnyKeyPath`'s `==` and `hash(into:)` call the `==` and `hash(into:)` of
/// subscript arguments (`\.items[index]`, `\.[key]`): user code, which may
/// be slow or may call SafeObserve. So under a lock key paths are only
/// compared by identity (the common case: a key-path literal is one object
/// per use site); a key path that is not identical is queued, compared after
/// unlocking, and the caller retries with the verdict known.
///
/// Costs nothing until a key path that is not identical is met: the common
/// registration never allocates or retains anything for it.
///
/// ```swift
/// var matcher = _KeyPathMatcher()
/// while true {
///     let found = lock.withLock { state in state.first { matcher.matches($0.keyPath, keyPath) == true } }
///     guard matcher.needsComparison else { return found }
///     matcher.compareQueued(with: keyPath)   // unlocked
/// }
/// ```
struct _KeyPathMatcher {
    private final class Verdicts {
        /// Key paths compared already, with the verdict.
        var known: [(other: AnyKeyPath, isEqual: Bool)] = []
        /// Key paths met under the lock that still need `==`.
        var queued: [AnyKeyPath] = []
    }

    /// Created on the first key path that is not identical.
    private var verdicts: Verdicts?

    /// Whether `other` equals `keyPath`: `true` or `false` when known without
    /// user code, `nil` when it was queued for ``compareQueued(with:)``. Safe
    /// under a lock (allocates, runs no user code).
    @inline(__always)
    mutating func matches(_ other: AnyKeyPath, _ keyPath: AnyKeyPath) -> Bool? {
        if other === keyPath { return true }
        return lookUp(other)
    }

    @inline(never)
    private mutating func lookUp(_ other: AnyKeyPath) -> Bool? {
        let verdicts = self.verdicts ?? Verdicts()
        self.verdicts = verdicts
        if let verdict = verdicts.known.first(where: { $0.other === other }) { return verdict.isEqual }
        if !verdicts.queued.contains(where: { $0 === other }) { verdicts.queued.append(other) }
        return nil
    }

    /// Whether some key path met under the lock is still to be compared.
    var needsComparison: Bool { verdicts.map { !$0.queued.isEmpty } ?? false }

    /// Compares the queued key paths with `keyPath`. Call it outside locks:
    /// it runs user code.
    mutating func compareQueued(with keyPath: AnyKeyPath) {
        guard let verdicts else { return }
        for other in verdicts.queued { verdicts.known.append((other, other == keyPath)) }
        verdicts.queued.removeAll()
    }
}
