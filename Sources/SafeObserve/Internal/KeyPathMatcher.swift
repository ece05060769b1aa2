/// Decides whether key paths equal one given key path, calling `==` only
/// outside locks.
///
/// `AnyKeyPath`'s `==` and `hash(into:)` call the `==` and `hash(into:)` of
/// subscript arguments (`\.items[index]`, `\.[key]`): user code, which may
/// be slow, may throw a fit, or may call SafeObserve. So under a lock key
/// paths are only compared by identity (which is also the common case: a
/// key-path literal is one object per use site); a key path that is not
/// identical is queued, compared after unlocking, and the caller retries
/// with the verdict known.
///
/// ```swift
/// var matcher = _KeyPathMatcher(keyPath)
/// while true {
///     let found = lock.withLock { state in state.first { matcher.matches($0.keyPath) == true } }
///     guard matcher.needsComparison else { return found }
///     matcher.compareQueued()   // unlocked
/// }
/// ```
struct _KeyPathMatcher {
    let keyPath: AnyKeyPath
    /// Key paths compared already, with the verdict.
    private var verdicts: [(other: AnyKeyPath, isEqual: Bool)] = []
    /// Key paths met under the lock that still need `==`.
    private var queued: [AnyKeyPath] = []

    init(_ keyPath: AnyKeyPath) {
        self.keyPath = keyPath
    }

    /// Whether `other` equals the key path: `true` or `false` when known
    /// without user code, `nil` when it was queued for ``compareQueued()``.
    /// Safe under a lock.
    mutating func matches(_ other: AnyKeyPath) -> Bool? {
        if other === keyPath { return true }
        if let verdict = verdicts.first(where: { $0.other === other }) { return verdict.isEqual }
        if !queued.contains(where: { $0 === other }) { queued.append(other) }
        return nil
    }

    /// Whether some key path met under the lock is still to be compared.
    var needsComparison: Bool { !queued.isEmpty }

    /// Compares the queued key paths. Call it outside locks: it runs user code.
    mutating func compareQueued() {
        for other in queued { verdicts.append((other, other == keyPath)) }
        queued.removeAll()
    }
}
