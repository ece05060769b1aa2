import Synchronization

/// One observation relation: a listener watching one key path of one object.
///
/// `safeObserve(_:by:options:changeHandler:)` returns a token. Keeping it is
/// optional — relations end by themselves when either side dies — but it is
/// the most direct way to end one relation early:
///
/// ```swift
/// let token = counter.safeObserve(\.count, by: label) { label, _, change in
///     label.text = "\(change.newValue!)"
/// }
/// token.invalidate()   // idempotent
/// ```
///
/// A token does not retain the listener, the observed object or the handler:
/// holding a token never keeps anything else alive. (It does keep the
/// listener's *memory* — its allocation, not its contents — from being reused
/// until the token is released, which is what makes probing the listener safe.)
///
/// - Note: Tokens compare by identity. Observing the same key path of the same
///   object by the same listener twice returns the same token.
public final class ObservationToken: Hashable, CustomDebugStringConvertible, @unchecked Sendable {
    // @unchecked Sendable: every stored property is immutable or atomic,
    // except `_slot`, only touched under the channel's lock.

    private let _active: Atomic<Bool>

    /// The options the relation was registered with.
    ///
    /// ```swift
    /// let token = counter.safeObserve(\.count, by: self, options: [.old, .new]) { _, _, _ in }
    /// assert(token.options == [.old, .new])
    /// ```
    public let options: ObservationOptions

    /// The observed key path, or `nil` for a token that never observed anything.
    ///
    /// ```swift
    /// let token = counter.safeObserve(\.count, by: self) { _, _, _ in }
    /// assert(token.keyPath == \Counter.count)
    /// ```
    public let keyPath: AnyKeyPath?

    /// The identity of the observed object, or `nil` for an inert token.
    ///
    /// ```swift
    /// let token = counter.safeObserve(\.count, by: self) { _, _, _ in }
    /// assert(token.observedObjectID == ObjectIdentifier(counter))
    /// ```
    public let observedObjectID: ObjectIdentifier?

    /// The listener, while it is alive.
    ///
    /// ```swift
    /// let token = counter.safeObserve(\.count, by: label) { _, _, _ in }
    /// assert(token.listener === label)
    /// ```
    public var listener: AnyObject? {
        _listener?.load()
    }

    /// Whether the listener began deinitialization (or there is none).
    var _isListenerGone: Bool {
        _listener?.isGone ?? true
    }

    /// The listener, never retained.
    let _listener: _UnretainedReference?

    /// The listener's proxy. Strong: the proxy holds its active relations and
    /// a relation its proxy, a cycle that every way a relation ends breaks
    /// (removal, either side's teardown, the sweep). A weak reference would
    /// cost the proxy a side table.
    let proxy: _ListenerProxy?
    let channel: _Channel?

    /// Index in the channel's relation list; guarded by the channel's lock.
    nonisolated(unsafe) var _slot: Int = -1
    // nonisolated(unsafe): read and written only inside `_Channel.state.withLock`.

    init(
        keyPath: AnyKeyPath, observedObjectID: ObjectIdentifier, listener: AnyObject,
        options: ObservationOptions, proxy: _ListenerProxy, channel: _Channel
    ) {
        _active = Atomic(true)
        self.keyPath = keyPath
        self.observedObjectID = observedObjectID
        _listener = _UnretainedReference(listener)
        self.options = options
        self.proxy = proxy
        self.channel = channel
    }

    /// A token that observes nothing (returned for rejected registrations).
    init(inertWith options: ObservationOptions) {
        _active = Atomic(false)
        keyPath = nil
        observedObjectID = nil
        _listener = nil
        self.options = options
        proxy = nil
        channel = nil
    }

    /// Whether the relation still delivers changes.
    ///
    /// `false` after ``invalidate()``, after `safeUnobserve`, once either side
    /// died and was noticed, and for tokens of rejected registrations.
    ///
    /// ```swift
    /// let token = counter.safeObserve(\.count, by: self) { _, _, _ in }
    /// token.invalidate()
    /// assert(!token.isActive)
    /// ```
    public var isActive: Bool {
        _active.load(ordering: .acquiring)
    }

    /// Ends the relation: its handler is never called again and is released.
    ///
    /// Idempotent, callable from any thread, from inside any handler, and after
    /// either side died.
    ///
    /// ```swift
    /// let token = counter.safeObserve(\.count, by: self) { _, _, _ in }
    /// token.invalidate()
    /// token.invalidate()   // no-op
    /// ```
    ///
    /// - Complexity: Amortized O(*k*), *k* being the key paths the listener
    ///   observes on this object.
    public func invalidate() {
        _remove()
    }

    /// Flips the relation to removed; `true` for the one caller that did it.
    func _markRemoved() -> Bool {
        _active.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged
    }

    /// Removes the relation from both sides, once.
    func _remove() {
        guard _markRemoved() else { return }
        proxy?.forget([self])
        channel?.remove(self)
    }

    /// Whether two tokens are the same relation (identity).
    ///
    /// ```swift
    /// let first = counter.safeObserve(\.count, by: self) { _, _, _ in }
    /// let again = counter.safeObserve(\.count, by: self) { _, _, _ in }
    /// assert(first == again)   // deduplicated: the same relation
    /// ```
    public static func == (lhs: ObservationToken, rhs: ObservationToken) -> Bool {
        lhs === rhs
    }

    /// Hashes the token's identity.
    ///
    /// ```swift
    /// var tokens: Set<ObservationToken> = []
    /// tokens.insert(counter.safeObserve(\.count, by: self) { _, _, _ in })
    /// ```
    public func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(self))
    }

    /// A description naming the key path, the listener and the state.
    ///
    /// ```swift
    /// print(token.debugDescription)
    /// // ObservationToken(\Counter.count, listener: Label, options: [.new], active)
    /// ```
    public var debugDescription: String {
        guard let keyPath else { return "ObservationToken(inert)" }
        let listenerName = listener.map { String(describing: type(of: $0)) } ?? "<released>"
        return "ObservationToken(\(keyPath), listener: \(listenerName), options: \(options), "
            + (isActive ? "active)" : "ended)")
    }
}
