import Synchronization

/// Calls one relation's handler.
///
/// `change` points to an `ObservedChange<Value>` carrying both the old and the
/// new value; the closure — created where `safeObserve` was called, so it is
/// specialized for the concrete types — casts it back and keeps only what the
/// relation's options ask for. Keeping `Value` out of the channel keeps the
/// delivery loop free of generic metadata lookups.
///
/// `sequence` is the change's number (``_Channel/changeCount``) for the
/// change phase of a relation that orders its changes
/// (``_Relation/ordersChanges``), 0 otherwise: a hop queues such a change
/// only if nothing newer reached the relation first (see
/// ``_Hop/Queue/enqueue(_:sequence:coalescing:tellsOld:object:hop:mailbox:hasPending:)``).
@usableFromInline
typealias _Deliver =
    @Sendable (
        _ listener: AnyObject, _ root: AnyObject, _ change: UnsafeRawPointer, _ phase: _Phase, _ sequence: UInt64
    ) -> Void

/// Which phase of a change a delivery is.
@usableFromInline
enum _Phase: Sendable {
    /// Before the store (`.prior`); `change` carries the old value only.
    case prior
    /// After the store; `change` carries both values.
    case change
    /// The mutation announced by `.prior` threw: no change follows. Sent only
    /// to a derivation's dependencies, and `change` must not be read.
    case priorAbandoned
}

/// The source of relation identities: never reused, unlike addresses.
private let _nextRelationID = Atomic<UInt64>(1)

/// The source of distinct relations' table keys (see
/// ``_Relation/distinctTableKey()``): never reused.
private let _nextDistinctKey = Atomic<UInt64>(1)

/// An unretained reference to a relation (a token's, a hop's), which loads
/// as one.
@usableFromInline
struct _RelationReference: Sendable {
    @usableFromInline let reference: _UnretainedReference

    init(_ relation: _Relation) {
        reference = _UnretainedReference(relation)
    }

    /// The relation unless its deinitialization began. Call it outside
    /// locks: dropping the result may run its deinit.
    @inline(__always)
    func load() -> _Relation? {
        // unsafeDowncast: `reference` is only ever made from a `_Relation`
        // (the initializer above).
        reference.load().map { unsafeDowncast($0, to: _Relation.self) }
    }
}

/// One observation relation: a listener watching one key path of one object.
///
/// The relation is what both sides hold: the observed property's ``_Channel``
/// (in its relation list, and in every snapshot a change is being delivered
/// to) and the listener's ``_ListenerProxy``. It owns the handler, immutably:
/// so the delivery loop calls it without retaining anything, and the handler
/// (with whatever it captured) is released exactly when the last of those
/// holders lets go — after the relation ended and after any delivery that was
/// still looking at it returned. Users hold an ``ObservationToken``, which
/// never keeps a relation alive.
@usableFromInline
// @unchecked Sendable: every stored property is immutable or atomic, except
// `slot` (only touched under the channel's lock).
class _Relation: @unchecked Sendable {
    /// The relation's identity for tokens: unique for the life of the process.
    final let id = _nextRelationID.wrappingAdd(1, ordering: .relaxed).oldValue
    final let deliver: _Deliver
    final let options: ObservationOptions
    final let keyPath: AnyKeyPath
    final let objectID: ObjectIdentifier
    /// Where the listener's proxy files the relation: under its object for a
    /// single property (a handful per object), under its object and key-path
    /// hash for a derived key path (any number per object; see
    /// ``derivedTableKey(_:_:)``) — or under a key of its own, which no other
    /// relation shares, when it must never be deduplicated (a
    /// ``KeyValueObservation``'s; see ``distinctTableKey()``).
    final let tableKey: ObjectIdentifier
    /// The listener, never retained (probed with `swift_tryRetain`). Its
    /// allocation is kept by `proxy`'s reference to it.
    final let listener: _UnretainedHandle
    /// The listener's side. Strong: the proxy holds its active relations and a
    /// relation its proxy, a cycle that every way a relation ends breaks
    /// (removal, either side's teardown, the sweeps). A derivation's proxy
    /// holds none of its dependencies (``_ListenerProxy/filesRelations``):
    /// for them it only keeps the derivation's allocation.
    final let proxy: _ListenerProxy
    /// Whether this relation is one of a derivation's dependencies (internal:
    /// its listener is the derivation, and introspection does not list it).
    /// Set by the derivation only, never derived from a user's value.
    final let isDependency: Bool
    /// Whether a change older than one already delivered is skipped (see
    /// ``_Channel/Emission/deliver(root:change:phase:sequence:)``): true
    /// except for dependencies that re-evaluate their key path (they always
    /// deliver its current value, and must see every change they were told
    /// the prior phase of).
    final let ordersChanges: Bool
    /// The observed property's channel; `nil` for a derived key path
    /// (``_DerivedRelation``), whose derivation watches every property the key
    /// path reads.
    final let channel: _Channel?

    private final let active = Atomic<Bool>(true)

    /// Whether the handler was told a prior notification whose change it has
    /// not been told yet (so the prior of a change nested inside that one is
    /// not delivered to it: see ``_Channel/Emission``). Beside `active`, in
    /// what would be padding.
    final let awaitsChangeOfPrior = Atomic<Bool>(false)

    /// The number (``_Channel/changeCount``) of the newest change delivered
    /// to the handler, or of the last change stored before the relation was
    /// added; an older one reaching it later is skipped.
    @usableFromInline final let lastChange = Atomic<UInt64>(0)

    /// Records that the handler is told the change numbered `sequence`;
    /// `false` (nothing recorded) if it was told a change as new already.
    /// Atomic, so that `lastChange` only grows when changes are delivered
    /// from several threads at once, or an `.initial` raises it meanwhile.
    @inline(__always)
    final func advanceLastChange(to sequence: UInt64) -> Bool {
        var current = lastChange.load(ordering: .relaxed)
        while current < sequence {
            let (exchanged, original) = lastChange.compareExchange(
                expected: current, desired: sequence, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// Index in the channel's relation list, or -1.
    // nonisolated(unsafe): read and written only inside `_Channel.state.withLock`.
    final nonisolated(unsafe) var slot = -1

    /// A relation on `channel`, one `@Observed` property.
    convenience init(
        keyPath: AnyKeyPath, objectID: ObjectIdentifier, options: ObservationOptions, proxy: _ListenerProxy,
        channel: _Channel, isDistinct: Bool = false, isDependency: Bool = false, ordersChanges: Bool? = nil,
        deliver: @escaping _Deliver
    ) {
        self.init(
            keyPath: keyPath, objectID: objectID, tableKey: isDistinct ? Self.distinctTableKey() : objectID,
            options: options, proxy: proxy,
            channelOrNil: channel, isDependency: isDependency, ordersChanges: ordersChanges ?? !isDependency,
            deliver: deliver)
    }

    /// `channelOrNil` is `nil` only for a ``_DerivedRelation``, which
    /// ``detachFromObservedSide()`` relies on.
    fileprivate init(
        keyPath: AnyKeyPath, objectID: ObjectIdentifier, tableKey: ObjectIdentifier, options: ObservationOptions,
        proxy: _ListenerProxy, channelOrNil channel: _Channel?, isDependency: Bool, ordersChanges: Bool,
        deliver: @escaping _Deliver
    ) {
        self.tableKey = tableKey
        self.isDependency = isDependency
        self.ordersChanges = ordersChanges
        self.deliver = deliver
        self.options = options
        self.keyPath = keyPath
        self.objectID = objectID
        self.listener = _UnretainedHandle(proxy.listener)
        self.proxy = proxy
        self.channel = channel
        // Changes stored before count as told: a change nested in one of
        // them never makes this relation be told that one.
        if let channel { lastChange.store(channel.changeCount.load(ordering: .relaxed), ordering: .relaxed) }
    }

    /// Whether the relation still delivers changes.
    final var isActive: Bool {
        active.load(ordering: .acquiring)
    }

    /// Whether the relation is active and its observed object alive.
    ///
    /// What introspection reports. A relation on a property whose object died
    /// while a copy of its storage kept the sentinel (and so the relation)
    /// alive is ended here, when it is noticed. Call it outside locks.
    final var isLive: Bool {
        guard isActive else { return false }
        guard let channel, channel.object.isGone else { return true }
        end()
        return false
    }

    /// Whether a derived key path with hash `hash` may equal this relation's
    /// key path: only if this relation is derived too (a single property's
    /// relation is matched by channel instead) and its key path has that hash.
    @inline(__always)
    final func mayEqualDerivedKeyPath(hashed hash: Int) -> Bool {
        // unsafeDowncast: only a `_DerivedRelation` is made without a channel.
        channel == nil && unsafeDowncast(self, to: _DerivedRelation.self).keyPathHash == hash
    }

    /// Whether both relations are on the same single `@Observed` property of
    /// the same object (one channel), whatever key paths spelled them.
    @inline(__always)
    final func isOnSameProperty(as other: _Relation) -> Bool {
        guard let channel else { return false }
        return channel === other.channel
    }

    /// Flips the relation to ended; `true` for the one caller that did it.
    final func markEnded() -> Bool {
        active.compareExchange(expected: true, desired: false, ordering: .acquiringAndReleasing).exchanged
    }

    /// Ends a relation found with a dead listener during a delivery (kept out
    /// of line: the delivery loop's cold path).
    @inline(never)
    final func endForDeadListener() {
        end()
        proxy.retireIfEmpty()
    }

    /// Adds the relation to its channel; `false` if the channel refused it
    /// (torn down, or the relation ended meanwhile) or it has none.
    final func attachToChannel() -> Bool {
        // Optional chaining borrows the channel (`self` is held for the call).
        channel?.add(self) == true
    }

    /// Ends the relation and detaches it from both sides, once.
    final func end() {
        guard markEnded() else { return }
        proxy.forget(self)
        detachFromObservedSide()
    }

    /// The observed side's half of ending (called once, by whoever ended the
    /// relation, after its proxy forgot it): leaves the channel, or stops the
    /// derivation of a derived key path.
    ///
    /// A branch rather than an override: a single property's relation ends
    /// without a virtual call, so chains cost it nothing.
    final func detachFromObservedSide() {
        // Optional chaining borrows the channel; `if let` would retain it.
        if channel?.remove(self) == nil {
            // unsafeDowncast: only a `_DerivedRelation` is made without a channel.
            unsafeDowncast(self, to: _DerivedRelation.self).stopDerivation()
        }
    }
}

/// A relation on a derived key path (`\.account.balance`, `\.fullName`): it
/// has no channel; its derivation watches what the key path reads.
final class _DerivedRelation: _Relation, @unchecked Sendable {
    // @unchecked Sendable: adds two immutable properties to `_Relation`.
    let derivation: _Derivation
    /// `keyPath.hashValue`, computed outside locks (it may run user code):
    /// dedupe and removal compare key paths with `==` only when it matches.
    let keyPathHash: Int

    /// Computes the key path's hash: call it outside locks.
    init(
        keyPath: AnyKeyPath, objectID: ObjectIdentifier, options: ObservationOptions, proxy: _ListenerProxy,
        derivation: _Derivation, isDistinct: Bool = false, deliver: @escaping _Deliver
    ) {
        self.derivation = derivation
        let hash = keyPath.hashValue
        keyPathHash = hash
        super.init(
            keyPath: keyPath, objectID: objectID,
            tableKey: isDistinct ? Self.distinctTableKey() : Self.derivedTableKey(objectID, hash),
            options: options,
            proxy: proxy, channelOrNil: nil, isDependency: false, ordersChanges: true, deliver: deliver)
    }

    /// Stops the derivation and its dependencies (kept out of line: the cold
    /// side of ``_Relation/detachFromObservedSide()``).
    @inline(never)
    func stopDerivation() {
        derivation.stop()
    }

}

extension _Relation {
    /// A key for a relation that is never deduplicated: a number never used
    /// before, with bit 2 set — which no object's identity (8-byte aligned)
    /// and no derived key has — so that no other relation is ever filed
    /// under it.
    @inline(never)
    static func distinctTableKey() -> ObjectIdentifier {
        let number = _nextDistinctKey.wrappingAdd(1, ordering: .relaxed).oldValue
        // unsafeBitCast: an identity used only as a table key, never as a reference.
        return unsafeBitCast(UInt(truncatingIfNeeded: number) &<< 4 | 4, to: ObjectIdentifier.self)
    }
}
