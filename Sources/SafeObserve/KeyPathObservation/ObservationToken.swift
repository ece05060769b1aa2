/// A handle to one observation relation: a listener watching one key path of
/// one object.
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
/// A token is a small value that keeps nothing alive: not the listener, not
/// the observed object, not the handler. Once the relation ends, its handler
/// and everything the handler captured are released even while tokens for it
/// are still around. (On Linux a token keeps the relation's bookkeeping
/// *allocated* — a few dozen bytes, never its contents — until the token is
/// dropped. Its identity is an id that is never reused.)
///
/// Tokens compare equal when they refer to the same relation: observing the
/// same key path of the same object by the same listener twice returns equal
/// tokens. Tokens of rejected registrations (inert tokens) are all equal.
public struct ObservationToken: Hashable, CustomDebugStringConvertible, @unchecked Sendable {
    // @unchecked Sendable: every stored property is immutable; `AnyKeyPath`
    // is immutable too, and `_relation` is only reached through atomic probes.

    /// The relation, never retained; `nil` for an inert token.
    @usableFromInline let _relation: _RelationReference?

    /// The relation's identity (``_Relation/id``), never reused; 0 for an
    /// inert token. Not the relation's address, which a later relation may
    /// take once this one is freed.
    let _id: UInt64

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

    init(_ relation: _Relation) {
        _relation = _RelationReference(relation)
        _id = relation.id
        options = relation.options
        keyPath = relation.keyPath
        observedObjectID = relation.objectID
    }

    /// A token that observes nothing (returned for rejected registrations).
    init(inertWith options: ObservationOptions) {
        _relation = nil
        _id = 0
        self.options = options
        keyPath = nil
        observedObjectID = nil
    }

    /// The relation, unless it ended and was released.
    var _liveRelation: _Relation? { _relation?.load() }

    /// The listener, while the relation is active and the listener alive.
    ///
    /// ```swift
    /// let token = counter.safeObserve(\.count, by: label) { _, _, _ in }
    /// assert(token.listener === label)
    /// ```
    public var listener: AnyObject? {
        guard let relation = _liveRelation, relation.isLive else { return nil }
        return relation.listener.load()
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
        _liveRelation?.isLive ?? false
    }

    /// Ends the relation: its handler is never called again and is released
    /// (by a delivery of a change already under way on another thread, as
    /// soon as that delivery returns: for a ``SafeObservationRegistrar``'s
    /// property, once its `withMutation` returns).
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
    /// - Complexity: Amortized O(1).
    public func invalidate() {
        _liveRelation?.end()
    }

    /// Whether two tokens refer to the same relation.
    ///
    /// ```swift
    /// let first = counter.safeObserve(\.count, by: self) { _, _, _ in }
    /// let again = counter.safeObserve(\.count, by: self) { _, _, _ in }
    /// assert(first == again)   // deduplicated: the same relation
    /// ```
    public static func == (lhs: ObservationToken, rhs: ObservationToken) -> Bool {
        lhs._id == rhs._id
    }

    /// Hashes the relation's identity.
    ///
    /// ```swift
    /// var tokens: Set<ObservationToken> = []
    /// tokens.insert(counter.safeObserve(\.count, by: self) { _, _, _ in })
    /// ```
    public func hash(into hasher: inout Hasher) {
        hasher.combine(_id)
    }

    /// A description naming the key path, the listener and the state.
    ///
    /// ```swift
    /// print(token.debugDescription)
    /// // ObservationToken(\Counter.count, listener: Label, options: [.new], active)
    /// ```
    ///
    /// The key path of an `@Observed` property is named as in source. Any
    /// other is printed as Swift prints it, with `<computed 0x… (Type)>` for
    /// each computed component: a chain or computed property, and also a key
    /// path formed through a protocol requirement (`\T.count` in code generic
    /// over a protocol declaring `count`), which is another key path than the
    /// property's, observed as a derived one, and names neither.
    public var debugDescription: String {
        guard let keyPath else { return "ObservationToken(inert)" }
        let listenerName = listener.map { String(describing: type(of: $0)) } ?? "<released>"
        let observed = keyPath === _notificationKeyPath ? "a notification" : _KeyPathNames.describe(keyPath)
        return "ObservationToken(\(observed), listener: \(listenerName), options: \(options), "
            + (isActive ? "active)" : "ended)")
    }
}
