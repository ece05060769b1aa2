/// A notification center whose observers are removed automatically: when
/// the listener dies, when the token is invalidated, or when the hub is
/// told to, in any order and any number of times.
///
/// Names carry their payload type (``NotificationName``), so posting and
/// observing are compile-checked. Observers are relations like key-path
/// observations: the same listener lifetimes, the same tokens, the same
/// introspection (``SafeObservation/relations(observedBy:)``, and per hub
/// ``relations()``).
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
///   delivered at once, before the outer post continues to later observers
///   (to observers on an actor: when made on it, before what they have
///   queued; see "Delivery" in the Notifications article).
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
        let (channels, finalizers) = state.withLock { state in
            defer { state = State() }
            return (state.allChannels(), Array(state.senderFinalizers.values))
        }
        for finalizer in finalizers { finalizer.remove() }
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
    ///     retained; once it died, nothing matches. A ``SafeObserver``
    ///     sender's death ends the relation inside its `deinit`, releasing
    ///     the handler whether or not posts wait for its actor; any other
    ///     sender's when the hub finds it dead.
    ///   - listener: The object on whose behalf the handler runs. Never
    ///     retained: the relation ends when it dies — inside its `deinit`
    ///     if it adopts ``SafeObserver``, otherwise at the next post that
    ///     reaches the relation (or a sweep that finds it dead first).
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
        return _observe(name.id, sender, listener, hoppingTo: listener, _droppingIsolation(handler))
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

    /// Observes every notification posted to this hub (of any name) with a
    /// handler that belongs to no listener — Foundation's
    /// `addObserver(forName: nil, object:queue:using:)`: it lives until the
    /// returned subscription is cancelled or deinitialized.
    ///
    /// ```swift
    /// let everything = hub.subscribeEvery { notification in
    ///     print("\(notification.name): \(notification.payload)")
    /// }
    /// // … later, or when `everything` is released:
    /// everything.cancel()
    /// ```
    ///
    /// - Parameters:
    ///   - sender: Only notifications posted by this object, if given.
    ///     Never retained; once it died, nothing matches.
    ///   - isolation: The actor the handler is isolated to; the caller's by default.
    ///   - handler: Called with the type-erased notification.
    /// - Returns: The subscription; the relation ends when it is cancelled
    ///   or deinitialized.
    /// - Complexity: Amortized O(1) expected.
    @inlinable
    public func subscribeEvery(
        from sender: AnyObject? = nil,
        isolation: isolated (any Actor)? = #isolation,
        handler: @escaping (AnyPostedNotification) -> Void
    ) -> NotificationSubscription {
        let subscription = NotificationSubscription()
        subscription.token = observeEvery(from: sender, by: subscription, isolation: isolation) { _, notification in
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
                actor: isolation, root: sender ?? self, options: .new, deliversNotifications: true
            ) { listener, _, change in handler(listener, change.newValue.unsafelyUnwrapped) }
            hop = actorHop
            deliver = { listener, root, notification, _, _ in
                let notification = notification.assumingMemoryBound(to: Value.self).pointee
                let onActor = actorHop.isOnActorAfterNotifying {
                    // unsafeDowncast: the relation's listener is `listener`.
                    handler(unsafeDowncast(listener, to: Listener.self), notification)
                }
                if !onActor { actorHop.enqueue(ObservedChange(newValue: notification, oldValue: nil)) }
            }
        } else {
            hop = nil
            deliver = { listener, _, notification, _, _ in
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

    /// Ends `listener`'s observations of `name`: those from `sender` if one
    /// is given, every one of them otherwise — unfiltered or filtered on
    /// any sender, as Foundation's `removeObserver(_:name:object: nil)`
    /// does. Idempotent; safe inside handlers.
    ///
    /// ```swift
    /// hub.unobserve(.unreadCountChanged, from: workInbox, by: badge)   // that sender's only
    /// hub.unobserve(.unreadCountChanged, by: badge)                    // whatever the sender
    /// ```
    ///
    /// - Parameters:
    ///   - name: The name observed.
    ///   - sender: The sender filter of the observation to end; `nil` ends
    ///     the observations of `name` whatever their filter.
    ///   - listener: The listener.
    /// - Complexity: O(*k*) expected with a sender, *k* being the listener's
    ///   relations on that channel; O(*n*) without, in the listener's
    ///   relations.
    public func unobserve<Payload>(
        _ name: NotificationName<Payload>, from sender: AnyObject? = nil, by listener: AnyObject
    ) {
        guard let proxy = _ListenerProxy.of(listener, create: false) else { return }
        guard let sender else {
            endRelations(of: proxy) { entry, _ in entry.nameID == name.id }
            return
        }
        guard let channel = state.withLock({ $0.senderChannel(name.id, sender) }) else { return }
        proxy.endRelations(on: ObjectIdentifier(channel), keyPath: nil)
    }

    /// Ends every observation `listener` has on this hub filtered on
    /// `sender`, of any name (every name's included), as Foundation's
    /// `removeObserver(_:name: nil, object:)` does. Idempotent; safe inside
    /// handlers.
    ///
    /// ```swift
    /// hub.unobserve(from: workInbox, by: badge)
    /// ```
    ///
    /// - Parameters:
    ///   - sender: The sender the observations filter on.
    ///   - listener: The listener.
    /// - Complexity: O(*n*) in the listener's relations.
    public func unobserve(from sender: AnyObject, by listener: AnyObject) {
        guard let proxy = _ListenerProxy.of(listener, create: false) else { return }
        let id = ObjectIdentifier(sender)
        endRelations(of: proxy) { entry, channel in entry.sender == id && channel.object.refers(to: sender) }
    }

    /// Ends every observation `listener` has on this hub. Idempotent; safe
    /// inside handlers.
    ///
    /// ```swift
    /// hub.unobserve(by: badge)
    /// ```
    ///
    /// - Parameter listener: The listener.
    /// - Complexity: O(*n*) in the listener's relations.
    public func unobserve(by listener: AnyObject) {
        guard let proxy = _ListenerProxy.of(listener, create: false) else { return }
        endRelations(of: proxy) { _, _ in true }
    }

    /// Ends the relations of `proxy` on this hub's channels that `matches`
    /// accepts (called under the hub's lock: no user code).
    ///
    /// - Complexity: O(*n*) expected in the listener's relations.
    private func endRelations(of proxy: _ListenerProxy, where matches: (ChannelEntry, _Channel) -> Bool) {
        let ended = relations(of: proxy, where: matches)
        for relation in ended { relation.end() }
    }

    /// The active relations of `proxy` on this hub's channels that
    /// `matches` accepts.
    private func relations(of proxy: _ListenerProxy, where matches: (ChannelEntry, _Channel) -> Bool) -> [_Relation] {
        let relations = proxy.activeRelations()
        guard !relations.isEmpty else { return [] }
        return state.withLock { state in
            relations.filter { relation in
                guard let channel = relation.channel, let entry = state.entry(of: channel) else { return false }
                return matches(entry, channel)
            }
        }
    }

    // MARK: Introspection

    /// The live relations on this hub, of every listener, in registration
    /// order.
    ///
    /// A relation whose listener or sender died is ended when found, so
    /// the count is that of the relations that can still deliver:
    ///
    /// ```swift
    /// #expect(hub.relations().isEmpty)   // nothing leaked
    /// ```
    ///
    /// - Returns: A token per relation.
    /// - Complexity: O(*c* + *n* log *n*), *c* being the hub's channels and
    ///   *n* their relations. Meant for debugging and tests.
    public func relations() -> [ObservationToken] {
        let channels = state.withLock { $0.allChannels() }
        return Self.live(channels.flatMap { $0.liveRelations() })
    }

    /// The live relations `listener` has on this hub, in registration order.
    ///
    /// ```swift
    /// #expect(hub.relations(observedBy: badge).count == 1)
    /// ```
    ///
    /// - Parameter listener: The listener.
    /// - Returns: A token per relation.
    /// - Complexity: O(*n* log *n*) in the listener's relations.
    public func relations(observedBy listener: AnyObject) -> [ObservationToken] {
        guard let proxy = _ListenerProxy.of(listener, create: false) else { return [] }
        return Self.live(relations(of: proxy) { _, _ in true })
    }

    /// Tokens of `relations` that can still deliver, in registration order;
    /// the others are ended (unlocked).
    private static func live(_ relations: [_Relation]) -> [ObservationToken] {
        relations.filter { relation in
            guard relation.isLive else { return false }
            guard relation.listener.isGone else { return true }
            relation.endForDeadListener()
            return false
        }
        .sorted { $0.id < $1.id }
        .map(ObservationToken.init)
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
    /// Observers are called group by group, each group in registration
    /// order: those of the name, those of the name from this sender, those
    /// of every name, then those of every name from this sender.
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
        guard var targets = hasSender ? _targets(for: name.id, sender: root) : _targets(for: name.id) else { return }
        let notification = PostedNotification(
            nameID: name.id,
            sender: hasSender ? targets.senderIdentity?.takeRetainedValue() ?? _SenderIdentity(sender: root) : nil,
            payload: payload)
        withUnsafePointer(to: notification) { pointer in
            _deliver(&targets.first, pointer, root: root)
            _deliver(&targets.second, pointer, root: root)
        }
        // Both checked: on the way out, the post knows there is nothing to
        // release.
        guard targets.every != nil || targets.everyFromSender != nil else { return }
        withUnsafePointer(to: AnyPostedNotification(notification)) { pointer in
            _deliver(&targets.every, pointer, root: root)
            _deliver(&targets.everyFromSender, pointer, root: root)
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
}
