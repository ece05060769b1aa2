/// A notification center whose observers are removed automatically: when
/// the listener dies, when the token is invalidated, or when the hub is
/// told to, in any order and any number of times.
///
/// Names carry their payload type (``NotificationName``), so posting and
/// observing are compile-checked. Observers are relations like key-path
/// observations: the same listener lifetimes, the same tokens, the same
/// introspection (``SafeObservation/relations(observedBy:)``).
///
/// ```swift
/// extension NotificationName where Payload == Int {
///     static let unreadCountChanged = NotificationName("unreadCountChanged")
/// }
///
/// NotificationHub.default.observe(.unreadCountChanged, by: badge) { badge, notification in
///     badge.count = notification.payload
/// }
/// NotificationHub.default.post(.unreadCountChanged, payload: 3)
/// ```
///
/// - A sender filter (`from:`) holds the sender by identity without keeping
///   it alive: after it dies the filter matches nothing, and an object later
///   allocated at its address is not taken for it.
/// - Observers of every name (``observeEvery(from:by:isolation:handler:)``)
///   receive every notification.
/// - Posting is synchronous, on the posting thread, and safe against
///   concurrent observation, removal and deaths. A handler registered from
///   an actor runs on that actor (see "Observing from actors and async code").
/// - Handlers never run while the hub holds a lock: they may observe,
///   unobserve, post or release anything. A post from inside a handler is
///   delivered at once, before the outer post continues to later observers.
public final class NotificationHub: Sendable {
    /// The process's shared hub.
    ///
    /// ```swift
    /// NotificationHub.default.post(.unreadCountChanged, payload: 3)
    /// ```
    public static let `default` = NotificationHub()

    let state = _Mutex(State())

    /// Creates a hub of its own (tests, or a subsystem's private traffic).
    ///
    /// ```swift
    /// let hub = NotificationHub()
    /// ```
    public init() {
        _NotificationHubs.insert(self)
    }

    deinit {
        _NotificationHubs.remove(self)
        // Every observer of this hub ends with it (handlers released here).
        let channels = state.withLock { state -> [_Channel] in
            defer { state = State() }
            return state.allChannels()
        }
        for channel in channels { channel.tearDown() }
    }

    // MARK: Observing

    /// Observes the notifications named `name` on behalf of `listener`.
    ///
    /// ```swift
    /// hub.observe(.unreadCountChanged, from: inbox, by: badge) { badge, notification in
    ///     badge.count = notification.payload
    /// }
    /// ```
    ///
    /// The handler receives the listener and the notification, so it never
    /// needs to capture either. It runs where `isolation` says, as a
    /// ``SafeObservable/safeObserve(_:by:options:isolation:changeHandler:)``
    /// handler does: on the caller's actor when registered from one
    /// (synchronously for a post made there, in order for a post made
    /// elsewhere), on the posting thread otherwise.
    ///
    /// Observing the same (name, sender, listener) again is a no-op that
    /// keeps the first handler and returns the first token.
    ///
    /// - Parameters:
    ///   - name: The name to observe.
    ///   - sender: Only notifications posted by this object, if given. Never
    ///     retained; once it died, nothing matches.
    ///   - listener: The object on whose behalf the handler runs. Never
    ///     retained: the relation ends when it dies.
    ///   - isolation: The actor the handler is isolated to, or `nil` for
    ///     synchronous delivery on the posting thread; the caller's by default.
    ///   - handler: Called with the listener and the notification.
    /// - Returns: The relation's token; `invalidate()` ends it, idempotently.
    /// - Complexity: Amortized O(1) expected.
    @discardableResult
    @inlinable
    public func observe<Listener: AnyObject, Payload>(
        _ name: NotificationName<Payload>,
        from sender: AnyObject? = nil,
        by listener: Listener,
        isolation: isolated (any Actor)? = #isolation,
        handler: @escaping (Listener, PostedNotification<Payload>) -> Void
    ) -> ObservationToken {
        _observe(name.id, sender, listener, hoppingTo: isolation, handler)
    }

    /// Observes the notifications named `name` on behalf of an actor, whose
    /// handler runs isolated to that actor.
    ///
    /// The handler receives the actor as an `isolated` parameter, so it
    /// reaches the actor's state synchronously without capturing it (a
    /// capture would keep the actor alive for as long as the relation):
    ///
    /// ```swift
    /// actor UnreadTally {
    ///     var total = 0
    ///     func watch(_ hub: NotificationHub) {
    ///         hub.observe(.unreadCountChanged, by: self) { tally, notification in
    ///             tally.total += notification.payload
    ///         }
    ///     }
    /// }
    /// ```
    ///
    /// A post made on the actor is delivered synchronously; one made
    /// elsewhere is delivered on the actor, in the order it was posted.
    ///
    /// - Parameters:
    ///   - name: The name to observe.
    ///   - sender: Only notifications posted by this object, if given. Never
    ///     retained.
    ///   - listener: The actor; never retained: the relation ends when it dies.
    ///   - handler: Called on the actor with it and the notification.
    /// - Returns: The relation's token; `invalidate()` ends it, idempotently.
    /// - Complexity: Amortized O(1) expected.
    @discardableResult
    @inlinable
    public func observe<Listener: Actor, Payload>(
        _ name: NotificationName<Payload>,
        from sender: AnyObject? = nil,
        by listener: Listener,
        handler: @escaping @Sendable (isolated Listener, PostedNotification<Payload>) -> Void
    ) -> ObservationToken {
        // unsafeBitCast: an `isolated` parameter changes no calling convention
        // (`Actor.assumeIsolated` relies on the same); the hop calls the
        // handler only on `listener`'s executor.
        let handler = unsafeBitCast(
            handler, to: (@Sendable (Listener, PostedNotification<Payload>) -> Void).self)
        return _observe(name.id, sender, listener, hoppingTo: listener, handler)
    }

    /// Observes every notification posted to this hub (of any name) on
    /// behalf of `listener`.
    ///
    /// ```swift
    /// hub.observeEvery(by: logger) { logger, notification in
    ///     logger.log("\(notification.name) from \(String(describing: notification.sender))")
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - sender: Only notifications posted by this object, if given.
    ///   - listener: The object on whose behalf the handler runs; never retained.
    ///   - isolation: The actor the handler is isolated to; the caller's by default.
    ///   - handler: Called with the listener and the type-erased notification.
    /// - Returns: The relation's token.
    /// - Complexity: Amortized O(1) expected.
    @discardableResult
    @inlinable
    public func observeEvery<Listener: AnyObject>(
        from sender: AnyObject? = nil,
        by listener: Listener,
        isolation: isolated (any Actor)? = #isolation,
        handler: @escaping (Listener, AnyPostedNotification) -> Void
    ) -> ObservationToken {
        _observe(nil, sender, listener, hoppingTo: isolation, handler)
    }

    /// Observes `name` with a handler that belongs to no listener: it lives
    /// until the returned subscription is cancelled or deinitialized (keep it
    /// for as long as the handler should run).
    ///
    /// ```swift
    /// let subscription = hub.subscribe(.unreadCountChanged) { notification in
    ///     print(notification.payload)
    /// }
    /// // … later, or when `subscription` is released:
    /// subscription.cancel()
    /// ```
    ///
    /// - Parameters:
    ///   - name: The name to observe.
    ///   - sender: Only notifications posted by this object, if given.
    ///   - isolation: The actor the handler is isolated to; the caller's by default.
    ///   - handler: Called with the notification.
    /// - Returns: The subscription; the relation ends when it is cancelled
    ///   or deinitialized.
    @inlinable
    public func subscribe<Payload>(
        _ name: NotificationName<Payload>,
        from sender: AnyObject? = nil,
        isolation: isolated (any Actor)? = #isolation,
        handler: @escaping (PostedNotification<Payload>) -> Void
    ) -> NotificationSubscription {
        let subscription = NotificationSubscription()
        subscription.token = observe(name, from: sender, by: subscription, isolation: isolation) { _, notification in
            handler(notification)
        }
        return subscription
    }

    /// Registers a typed handler on the channel of (`nameID`, `sender`);
    /// `nameID` `nil` stands for every name. The channel's deliveries point
    /// at the notification itself (a `Value`), not at an `ObservedChange`.
    /// With `isolation`, the handler runs on that actor (the caller's, or
    /// an actor listener's).
    @inlinable
    func _observe<Listener: AnyObject, Value>(
        _ nameID: Int?, _ sender: AnyObject?, _ listener: Listener, hoppingTo isolation: (any Actor)?,
        _ handler: @escaping (Listener, Value) -> Void
    ) -> ObservationToken {
        let deliver: _Deliver
        let hop: _Hop<Listener, AnyObject, Value>?
        // nonisolated(unsafe): called on the hop's actor (checked) when there
        // is one; otherwise on the posting thread, as nonisolated key-path
        // handlers are (see "Threading").
        nonisolated(unsafe) let handler = handler
        if let isolation {
            let actorHop = _Hop<Listener, AnyObject, Value>(
                actor: isolation, root: sender ?? self, options: .new
            ) { listener, _, change in handler(listener, change.newValue.unsafelyUnwrapped) }
            hop = actorHop
            deliver = { listener, root, notification, _ in
                let notification = notification.assumingMemoryBound(to: Value.self).pointee
                if actorHop.isOnActorAfterQueued() {
                    // unsafeDowncast: the relation's listener is `listener`.
                    handler(unsafeDowncast(listener, to: Listener.self), notification)
                } else {
                    actorHop.enqueue(ObservedChange(newValue: notification, oldValue: nil))
                }
            }
        } else {
            hop = nil
            deliver = { listener, _, notification, _ in
                // unsafeDowncast: the relation's listener is `listener`.
                handler(
                    unsafeDowncast(listener, to: Listener.self),
                    notification.assumingMemoryBound(to: Value.self).pointee)
            }
        }
        let token = _register(nameID: nameID, sender: sender, listener: listener, deliver: deliver)
        hop?.attach(token)
        return token
    }

    // MARK: Removing

    /// Ends `listener`'s observation of `name` (from `sender`, if given, or
    /// the unfiltered one). Idempotent; safe inside handlers.
    ///
    /// ```swift
    /// hub.unobserve(.unreadCountChanged, by: badge)
    /// ```
    ///
    /// - Complexity: O(*k*) expected, *k* being the listener's relations on
    ///   that channel.
    public func unobserve<Payload>(
        _ name: NotificationName<Payload>, from sender: AnyObject? = nil, by listener: AnyObject
    ) {
        guard let channel = state.withLock({ $0.channel(name.id, sender: sender) }) else { return }
        _ListenerProxy.of(listener, create: false)?.endRelations(on: ObjectIdentifier(channel), keyPath: nil)
    }

    /// Ends every observation `listener` has on this hub. Idempotent; safe
    /// inside handlers.
    ///
    /// ```swift
    /// hub.unobserve(by: badge)
    /// ```
    ///
    /// - Complexity: O(*n*) in the listener's relations.
    public func unobserve(by listener: AnyObject) {
        guard let proxy = _ListenerProxy.of(listener, create: false) else { return }
        let channels = Set(state.withLock { $0.allChannels() }.map(ObjectIdentifier.init))
        for relation in proxy.activeRelations() {
            if let channel = relation.channel, channels.contains(ObjectIdentifier(channel)) { relation.end() }
        }
    }

    // MARK: Posting

    /// Posts a notification: every observer of `name` (and of every name)
    /// that matches `sender` is called, synchronously on this thread, or on
    /// its actor for a handler registered from one.
    ///
    /// ```swift
    /// hub.post(.unreadCountChanged, payload: 3, from: inbox)
    /// ```
    ///
    /// Observers are called in registration order: those of the name, then
    /// those of the name from this sender, then those of every name.
    ///
    /// - Complexity: O(1) expected to find the observers, plus O(1) per
    ///   observer called.
    @inlinable
    public func post<Payload>(_ name: NotificationName<Payload>, payload: Payload, from sender: AnyObject? = nil) {
        // Two paths, so that neither retains its root: the poster holds the
        // sender, and the hub is `self`.
        if let sender {
            _post(name, payload, root: sender, hasSender: true)
        } else {
            _post(name, payload, root: self, hasSender: false)
        }
    }

    /// Posts from `root`: the sender, or the hub standing for "none" (never
    /// handed out as a sender). The caller holds `root` throughout.
    @inlinable @inline(__always)
    func _post<Payload>(_ name: NotificationName<Payload>, _ payload: Payload, root: AnyObject, hasSender: Bool) {
        let channels = _channels(for: name.id, sender: hasSender ? root : nil)
        guard channels.first != nil || channels.every != nil else { return }
        let notification = PostedNotification(
            nameID: name.id,
            sender: hasSender ? channels.senderIdentity?.takeUnretainedValue() ?? _SenderIdentity(sender: root) : nil,
            payload: payload)
        withUnsafePointer(to: notification) { pointer in
            channels.first?._withUnsafeGuaranteedRef { _deliver(pointer, to: $0, root: root) }
            channels.second?._withUnsafeGuaranteedRef { _deliver(pointer, to: $0, root: root) }
        }
        guard channels.every != nil else { return }
        withUnsafePointer(to: AnyPostedNotification(notification)) { pointer in
            channels.every?._withUnsafeGuaranteedRef { _deliver(pointer, to: $0, root: root) }
            channels.everyFromSender?._withUnsafeGuaranteedRef { _deliver(pointer, to: $0, root: root) }
        }
    }

    /// Posts a notification whose payload is `()`.
    ///
    /// ```swift
    /// extension NotificationName where Payload == Void {
    ///     static let didLogOut = NotificationName("didLogOut")
    /// }
    /// hub.post(.didLogOut)
    /// ```
    @inlinable
    public func post(_ name: NotificationName<Void>, from sender: AnyObject? = nil) {
        post(name, payload: (), from: sender)
    }

    /// Delivers the notification at `pointer` to `channel`'s relations.
    /// The caller holds `root`, so the emission takes no +1 on it.
    @inlinable
    func _deliver(_ pointer: UnsafeRawPointer, to channel: _Channel, root: AnyObject) {
        guard let emission = channel.beginEvent() else { return }
        emission.deliverEvent(root: root, change: pointer)
    }
}

/// A handler that belongs to no listener (made by
/// ``NotificationHub/subscribe(_:from:isolation:handler:)``): it runs until
/// the subscription is cancelled or deinitialized.
///
/// ```swift
/// var subscription: NotificationSubscription? = hub.subscribe(.didLogOut) { _ in print("bye") }
/// subscription = nil   // the handler is released, and never runs again
/// ```
public final class NotificationSubscription: SafeObserver, Sendable {
    /// Ends the relation in the subscription's `deinit`.
    ///
    /// ```swift
    /// let lifetime = subscription.observerLifetime   // the SafeObserver requirement
    /// ```
    public let observerLifetime = ObserverLifetime()
    // nonisolated(unsafe): written once, by `subscribe`, before the
    // subscription is returned (and so before it can be shared).
    @usableFromInline nonisolated(unsafe) var token: ObservationToken?

    @usableFromInline init() {}

    /// Ends the subscription: its handler never runs again and is released.
    /// Idempotent.
    ///
    /// ```swift
    /// subscription.cancel()
    /// ```
    public func cancel() {
        token?.invalidate()
    }

    /// Whether the handler still runs.
    ///
    /// ```swift
    /// assert(!subscription.isActive)   // after cancel()
    /// ```
    public var isActive: Bool { token?.isActive ?? false }
}

// MARK: - Implementation

/// What every notification relation's key path is: notification relations
/// are told apart from key-path ones by it (tokens describe them as such).
// nonisolated(unsafe): a key path is immutable, and this one captures nothing.
nonisolated(unsafe) let _notificationKeyPath: AnyKeyPath = \_NotificationMarker.name

/// The root of ``_notificationKeyPath``.
struct _NotificationMarker {
    var name = ""
}

/// The channels one post delivers to, without an allocation or a retain:
/// the name's, the name's from the sender, every name's, every name's from
/// the sender.
///
/// Borrowed: a channel found for a post stays in the hub's state until the
/// post returns. A name's channels live as long as the hub; a sender's are
/// removed only once the sweep finds their sender dead, or replaced when
/// another object registers at a dead sender's address; and the poster
/// holds both the hub and the sender.
/// Each is an `Unmanaged` reference, used through `_withUnsafeGuaranteedRef`
/// (an `unowned(unsafe)` one would still be retained when loaded).
@usableFromInline
struct _PostTargets {
    @usableFromInline var first: Unmanaged<_Channel>?
    @usableFromInline var second: Unmanaged<_Channel>?
    @usableFromInline var every: Unmanaged<_Channel>?
    @usableFromInline var everyFromSender: Unmanaged<_Channel>?
    /// The sender's identity, kept by its sender-filtered channel's entry
    /// (borrowed as the channels are), if it has one.
    @usableFromInline var senderIdentity: Unmanaged<_SenderIdentity>?

    init() {}
}

/// A sender-filtered channel, filed under its (sender, name) pair.
struct SenderEntry: _AddressKeyed {
    let tableKey: ObjectIdentifier
    let sender: ObjectIdentifier
    /// `nil`: every name.
    let nameID: Int?
    let channel: _Channel
    /// What the notifications posted by this sender refer to it by.
    let identity: _SenderIdentity

    /// The key of (`nameID`, `sender`): the sender's address with the name
    /// mixed into the bits the table hashes (above the 16-byte alignment).
    static func key(_ nameID: Int?, _ sender: ObjectIdentifier) -> ObjectIdentifier {
        let name = UInt(bitPattern: (nameID ?? -1) &+ 1) &* 0x9E37_79B9_7F4A_7C15
        // unsafeBitCast: an `ObjectIdentifier` is one word, used here as a
        // hash-table key only (never as an object).
        return unsafeBitCast(UInt(bitPattern: sender) ^ (name &<< 4), to: ObjectIdentifier.self)
    }
}

extension NotificationHub {
    /// The hub's channels: one per name (and one for every name), plus one
    /// per (name, sender) that a sender-filtered observer asked for. A
    /// channel's object is the hub, or the sender: the channel holds it
    /// unretained (its allocation, not the object, on the native probes), so
    /// no other object can take the sender's address while the channel
    /// exists, and `isGone` tells its death.
    struct State {
        /// The channel of each name's unfiltered observers, by name identity.
        var unfiltered: [_Channel?] = []
        /// The sender-filtered channels, by (sender, name) (`nil`: every
        /// name): one multiplicative hash and no allocation per look-up.
        var bySender = _AddressTable<SenderEntry>()
        /// The entries of `bySender` for every name (a post looks there only
        /// if there are some).
        var everyBySenderCount = 0
        /// Every name's unfiltered observers.
        var every: _Channel?
        /// The sender-filtered channels, in creation order, for the
        /// amortized sweep of dead senders.
        var senderChannels: [(nameID: Int?, sender: ObjectIdentifier, channel: _Channel)] = []
        var sweepCursor = 0

        func unfilteredChannel(_ nameID: Int?) -> _Channel? {
            guard let nameID else { return every }
            return nameID < unfiltered.count ? unfiltered[nameID] : nil
        }

        /// The channel of (`nameID`, the sender whose identity is `id`),
        /// whatever that sender's fate.
        func senderChannel(_ nameID: Int?, _ id: ObjectIdentifier) -> _Channel? {
            bySender.first(under: SenderEntry.key(nameID, id)) { entry in
                entry.sender == id && entry.nameID == nameID ? entry.channel : nil
            }
        }

        /// The entry of (`nameID`, `sender`, whose identity is `id`), its
        /// references borrowed (see `_PostTargets`), if it is `sender`'s.
        func borrowedSenderEntry(
            _ nameID: Int?, _ id: ObjectIdentifier, _ sender: AnyObject
        ) -> (Unmanaged<_Channel>, Unmanaged<_SenderIdentity>)? {
            bySender.first(under: SenderEntry.key(nameID, id)) { entry in
                guard entry.sender == id, entry.nameID == nameID, entry.channel.object.refers(to: sender) else {
                    return nil
                }
                return (Unmanaged.passUnretained(entry.channel), Unmanaged.passUnretained(entry.identity))
            }
        }

        func senderChannel(_ nameID: Int?, _ sender: AnyObject) -> _Channel? {
            // Not a dead sender's channel at a reused address.
            guard let channel = senderChannel(nameID, ObjectIdentifier(sender)), channel.object.refers(to: sender)
            else { return nil }
            return channel
        }

        /// The channel of (`nameID`, `sender`), if it exists.
        func channel(_ nameID: Int?, sender: AnyObject?) -> _Channel? {
            guard let sender else { return unfilteredChannel(nameID) }
            return senderChannel(nameID, sender)
        }

        /// The channel of (`nameID`, `sender`), made if missing; a channel
        /// at `sender`'s address that was another (dead) object's is
        /// returned as `stale`, to tear down after unlocking. Also returns
        /// two sender-filtered channels to probe for dead senders.
        mutating func channelCreating(
            _ nameID: Int?, sender: AnyObject?, hub: NotificationHub
        ) -> (channel: _Channel, stale: _Channel?, probes: [_Channel]) {
            guard let sender else {
                if let channel = unfilteredChannel(nameID) { return (channel, nil, []) }
                let channel = _Channel(object: hub, keyPath: nil)
                if let nameID {
                    if unfiltered.count <= nameID {
                        unfiltered.append(contentsOf: repeatElement(nil, count: nameID + 1 - unfiltered.count))
                    }
                    unfiltered[nameID] = channel
                } else {
                    every = channel
                }
                return (channel, nil, [])
            }
            let id = ObjectIdentifier(sender)
            var stale: _Channel?
            if let channel = senderChannel(nameID, id) {
                guard !channel.object.refers(to: sender) else { return (channel, nil, []) }
                stale = channel
                _ = remove(senderChannel: channel)
            }
            let channel = _Channel(object: sender, keyPath: nil)
            bySender.insert(
                SenderEntry(
                    tableKey: SenderEntry.key(nameID, id), sender: id, nameID: nameID, channel: channel,
                    identity: _SenderIdentity(channel.object)))
            senderChannels.append((nameID, id, channel))
            if nameID == nil { everyBySenderCount += 1 }
            _checkInvariants()
            return (channel, stale, nextProbes())
        }

        /// Two sender-filtered channels, round-robin.
        mutating func nextProbes() -> [_Channel] {
            guard !senderChannels.isEmpty else { return [] }
            var probes: [_Channel] = []
            for _ in 0..<min(2, senderChannels.count) {
                if sweepCursor >= senderChannels.count { sweepCursor = 0 }
                probes.append(senderChannels[sweepCursor].channel)
                sweepCursor += 1
            }
            return probes
        }

        /// Forgets `channel` (its sender died); `false` if it was not here.
        mutating func remove(senderChannel channel: _Channel) -> Bool {
            guard let index = senderChannels.firstIndex(where: { $0.channel === channel }) else { return false }
            let (nameID, sender, _) = senderChannels.remove(at: index)
            if nameID == nil { everyBySenderCount -= 1 }
            defer { _checkInvariants() }
            let removed = bySender.remove(under: SenderEntry.key(nameID, sender)) { $0.channel === channel }
            // Released with the state's other garbage, after unlocking, by
            // the caller's `channel` (which it holds).
            _ = removed
            return true
        }

        /// Checks that the sweep's list and the look-up table agree, after
        /// each change of the sender-filtered channels (under
        /// `SAFEOBSERVE_INTERNAL_CHECKS`, while they are few).
        func _checkInvariants() {
            #if SAFEOBSERVE_INTERNAL_CHECKS
                guard senderChannels.count <= 64 else { return }
                precondition(senderChannels.count == bySender.count, "NotificationHub: sender index out of step")
                precondition(
                    everyBySenderCount == senderChannels.filter { $0.nameID == nil }.count,
                    "NotificationHub: every-name sender channels miscounted")
                for (nameID, sender, channel) in senderChannels {
                    precondition(
                        senderChannel(nameID, sender) === channel,
                        "NotificationHub: a sender channel is missing from the index")
                }
            #endif
        }

        func allChannels() -> [_Channel] {
            unfiltered.compactMap { $0 } + (every.map { [$0] } ?? []) + senderChannels.map(\.channel)
        }
    }

    /// The channels a post of `nameID` from `sender` delivers to; none for
    /// a post from inside the sender's own `deinit` (it can no longer be
    /// handed to anyone).
    @usableFromInline
    func _channels(for nameID: Int, sender: AnyObject?) -> _PostTargets {
        var targets = _PostTargets()
        if let sender, _swift_isDeallocating(sender) { return targets }
        state.withLock { state in
            if nameID < state.unfiltered.count {
                targets.first = state.unfiltered.withUnsafeBufferPointer { buffer in
                    // A bitwise copy of the state's reference, without a
                    // retain: borrowed for the post (see `_PostTargets`).
                    UnsafeRawPointer(buffer.baseAddress! + nameID).load(as: Unmanaged<_Channel>?.self)
                }
            }
            targets.every = state.every.map { Unmanaged.passUnretained($0) }
            if let sender, !state.bySender.isEmpty {
                let id = ObjectIdentifier(sender)
                if let (channel, identity) = state.borrowedSenderEntry(nameID, id, sender) {
                    targets.second = channel
                    targets.senderIdentity = identity
                }
                if state.everyBySenderCount > 0, let (channel, identity) = state.borrowedSenderEntry(nil, id, sender) {
                    targets.everyFromSender = channel
                    targets.senderIdentity = identity
                }
            }
        }
        if targets.first == nil {
            targets.first = targets.second
            targets.second = nil
        }
        if targets.every == nil {
            targets.every = targets.everyFromSender
            targets.everyFromSender = nil
        }
        return targets
    }

    /// Registers `listener` on the channel of (`nameID`, `sender`).
    @usableFromInline
    func _register(nameID: Int?, sender: AnyObject?, listener: AnyObject, deliver: @escaping _Deliver)
        -> ObservationToken
    {
        let inert = ObservationToken(inertWith: .new)
        if _swift_isDeallocating(listener) {
            _Diagnostics.reportProgrammerError(
                "SafeObserve: cannot observe notifications by a \(type(of: listener)) during its own deinit")
            return inert
        }
        // A sender in its deinit can post nothing more: nothing to observe.
        if let sender, _swift_isDeallocating(sender) { return inert }
        // Again with a new proxy if the listener's was retired meanwhile.
        while true {
            guard let proxy = _ListenerProxy.of(listener, create: true) else { return inert }
            let (channel, stale, probes) = state.withLock { $0.channelCreating(nameID, sender: sender, hub: self) }
            stale?.tearDown()
            sweepDeadSenders(probes)
            let relation = _Relation(
                keyPath: _notificationKeyPath, objectID: ObjectIdentifier(channel), options: .new, proxy: proxy,
                channel: channel, deliver: deliver)
            var existing: _Relation?
            guard proxy.insert(relation, existing: &existing) else {
                if _swift_isDeallocating(listener) { return inert }
                continue
            }
            if let existing { return ObservationToken(existing) }
            let token = ObservationToken(relation)
            if !channel.add(relation) { relation.end() }
            return token
        }
    }

    /// Tears down the channels among `probes` whose sender died (probed
    /// unlocked: a liveness probe must not run under the lock).
    private func sweepDeadSenders(_ probes: [_Channel]) {
        for channel in probes where channel.object.isGone {
            if state.withLock({ $0.remove(senderChannel: channel) }) { channel.tearDown() }
        }
    }

    /// Each channel with its name's identity (`nil`: every name), for the
    /// graph of live relations.
    func _namedChannels() -> [(nameID: Int?, channel: _Channel)] {
        state.withLock { state in
            var channels: [(nameID: Int?, channel: _Channel)] = []
            for (nameID, channel) in state.unfiltered.enumerated() {
                if let channel { channels.append((nameID, channel)) }
            }
            if let every = state.every { channels.append((nil, every)) }
            for entry in state.senderChannels { channels.append((entry.nameID, entry.channel)) }
            return channels
        }
    }

    /// How many sender-filtered channels the hub holds (tests).
    var _senderChannelCount: Int {
        state.withLock { $0.senderChannels.count }
    }
}

// MARK: - Notifications as an asynchronous sequence

extension NotificationHub {
    /// The notifications named `name`, as an asynchronous sequence.
    ///
    /// ```swift
    /// for await notification in hub.notifications(named: .unreadCountChanged) {
    ///     badge.count = notification.payload
    /// }
    /// ```
    ///
    /// Each iterator observes from the moment it is made until the sequence
    /// ends: the consuming task is cancelled (which ends the observation at
    /// once), the iterator is dropped, or the hub dies. With a sender, it
    /// also finishes when the sender dies: inside the sender's `deinit` if
    /// it adopts ``SafeObserver``, otherwise when the sweep of dead
    /// listeners finds it dead (as a plain listener's relations end).
    /// Nothing is yielded after the sender died. Neither the sequence nor
    /// its iterator keeps the hub or the sender alive.
    ///
    /// - Parameters:
    ///   - name: The name to observe.
    ///   - sender: Only notifications posted by this object, if given.
    ///   - buffering: What is kept for a consumer that falls behind; every
    ///     notification by default.
    /// - Returns: A sequence of ``PostedNotification`` values.
    public func notifications<Payload>(
        named name: NotificationName<Payload>, from sender: AnyObject? = nil,
        buffering: ObservationBuffering = .unbounded
    ) -> PostedNotifications<Payload> {
        PostedNotifications(hub: self, name: name, sender: sender, buffering: buffering)
    }
}

/// The notifications of one name, as an asynchronous sequence (made by
/// ``NotificationHub/notifications(named:from:buffering:)``).
///
/// ```swift
/// for await notification in hub.notifications(named: .unreadCountChanged) { print(notification.payload) }
/// ```
public struct PostedNotifications<Payload: Sendable>: AsyncSequence, Sendable {
    /// One notification.
    ///
    /// ```swift
    /// for await notification in hub.notifications(named: .unreadCountChanged) { print(notification.payload) }
    /// ```
    public typealias Element = PostedNotification<Payload>
    /// The sequence never throws.
    ///
    /// ```swift
    /// for await _ in hub.notifications(named: .unreadCountChanged) { }   // no `try`
    /// ```
    public typealias Failure = Never

    @usableFromInline let hub: _UnretainedReference
    @usableFromInline let name: NotificationName<Payload>
    @usableFromInline let sender: _UnretainedReference?
    @usableFromInline let buffering: ObservationBuffering

    init(hub: NotificationHub, name: NotificationName<Payload>, sender: AnyObject?, buffering: ObservationBuffering) {
        self.hub = _UnretainedReference(hub)
        self.name = name
        self.sender = sender.map { _UnretainedReference($0) }
        self.buffering = buffering
    }

    /// Observes the name until the iterator is cancelled, dropped, or the
    /// hub dies.
    ///
    /// ```swift
    /// var iterator = hub.notifications(named: .unreadCountChanged).makeAsyncIterator()
    /// let next = await iterator.next()
    /// ```
    public func makeAsyncIterator() -> AsyncIterator {
        let (stream, continuation) = AsyncStream.makeStream(
            of: Element.self, bufferingPolicy: buffering.policy(for: Element.self))
        let relay = _StreamRelay()
        let target = hub.load().map { unsafeDowncast($0, to: NotificationHub.self) }
        let senderObject = sender?.load()
        guard let target, sender == nil || senderObject != nil else {
            continuation.finish()
            return AsyncIterator(base: stream.makeAsyncIterator(), relay: relay)
        }
        // The finisher finishes the stream when the relation (and so this
        // handler) is released, however it ends.
        let finisher = _StreamFinisher(continuation)
        let token = target._observe(name.id, senderObject, relay, hoppingTo: nil) {
            (_: _StreamRelay, notification: Element) in
            finisher.continuation.yield(notification)
        }
        // The sender's death finishes the stream: a finalizer on the sender's
        // side, run inside its `deinit` if it is a `SafeObserver`, when the
        // sweep of dead listeners finds it otherwise.
        var finalizer: (proxy: _ListenerProxy, id: Int)?
        if let senderObject, let proxy = _ListenerProxy.of(senderObject, create: true) {
            if let id = proxy.addFinalizer({ continuation.finish() }) {
                finalizer = (proxy, id)
            } else {
                continuation.finish()
            }
        }
        continuation.onTermination = { [finalizer] _ in
            token.invalidate()
            if let finalizer { finalizer.proxy.removeFinalizer(finalizer.id) }
        }
        if !token.isActive { continuation.finish() }
        return AsyncIterator(base: stream.makeAsyncIterator(), relay: relay)
    }

    /// Yields the notifications; see ``PostedNotifications``.
    ///
    /// ```swift
    /// while let notification = await iterator.next() { print(notification.payload) }
    /// ```
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<Element>.Iterator
        /// The listener of the relation: it ends when the iterator dies.
        let relay: _StreamRelay

        /// The next notification, or `nil` once the sequence finished.
        ///
        /// ```swift
        /// let notification = await iterator.next()
        /// ```
        public mutating func next() async -> Element? {
            await base.next()
        }

        /// The next notification, or `nil` once the sequence finished,
        /// awaited in the caller's isolation.
        ///
        /// ```swift
        /// let notification = await iterator.next(isolation: #isolation)
        /// ```
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
            await base.next(isolation: actor)
        }
    }
}

/// The live hubs, weakly (the graph of live relations lists their
/// observers).
enum _NotificationHubs {
    private struct Entry {
        weak var hub: NotificationHub?
    }

    private static let table = _Mutex<[ObjectIdentifier: Entry]>([:])

    static func insert(_ hub: NotificationHub) {
        table.withLock { $0[ObjectIdentifier(hub)] = Entry(hub: hub) }
    }

    static func remove(_ hub: NotificationHub) {
        _ = table.withLock { $0.removeValue(forKey: ObjectIdentifier(hub)) }
    }

    /// The hubs alive now.
    static func all() -> [NotificationHub] {
        table.withLock { $0.values.compactMap(\.hub) }
    }
}
