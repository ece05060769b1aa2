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
