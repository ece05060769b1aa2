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
    /// once while the task awaits the next notification; otherwise at the
    /// first notification posted after the cancellation, which is not
    /// buffered), the iterator is dropped, or the hub dies. With a sender, it
    /// also finishes when the sender dies: inside the sender's `deinit` if
    /// it adopts ``SafeObserver``; otherwise within half a second, with no
    /// other activity needed (while such a sequence exists, a thread probes
    /// its senders every quarter second; it ends when none is left, so
    /// nothing runs for a process without one). Nothing is yielded after
    /// the sender died: the notifications still buffered then are dropped,
    /// and the next call to `next` returns `nil`, as it does from then on.
    /// Neither the sequence nor its iterator keeps the hub or the sender
    /// alive.
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

    /// Observes the name until the iterator is cancelled, dropped, the hub
    /// dies or, with a sender, the sender dies.
    ///
    /// ```swift
    /// var iterator = hub.notifications(named: .unreadCountChanged).makeAsyncIterator()
    /// let next = await iterator.next(isolation: #isolation)
    /// ```
    public func makeAsyncIterator() -> AsyncIterator {
        let buffer = _AsyncBuffer<Element>(buffering: buffering)
        let relay = _StreamRelay()
        // The task making the iterator consumes it until another calls
        // `next()` (see `ObservedChanges.makeAsyncIterator()`).
        relay.consumer.record()
        let target = hub.load().map { unsafeDowncast($0, to: NotificationHub.self) }
        let senderObject = sender?.load()
        guard let target, sender == nil || senderObject != nil else {
            buffer.finish()
            return AsyncIterator(buffer: buffer, relay: relay, sender: nil)
        }
        // The finisher finishes the sequence when the relation (and so this
        // handler) is released, however it ends.
        let finisher = _StreamFinisher(buffer)
        // Once the consuming task is cancelled, the first notification to
        // come finishes the sequence instead (see `_yielding(to:consumer:)`).
        let consumer = relay.consumer
        let token = target._observe(name.id, senderObject, relay, hoppingTo: nil) {
            (_: _StreamRelay, notification: Element) in
            if consumer.isCancelled {
                finisher.buffer.finish()
            } else {
                finisher.buffer.yield(notification)
            }
        }
        // The sender's death finishes the sequence: inside its `deinit` if it
        // is a `SafeObserver` (a finalizer on its proxy), soon after
        // otherwise (the watch of plain senders).
        var finalizer: (proxy: _ListenerProxy, id: Int)?
        var watch: (sender: ObjectIdentifier, id: Int)?
        if let senderObject {
            if let proxy = _ListenerProxy.ofSafeObserver(senderObject) {
                // What is buffered is never yielded once the sender died:
                // released then, not at the consumer's next `next()`.
                if let id = proxy.addFinalizer({ buffer.finish(discardingBuffered: true) }) {
                    finalizer = (proxy, id)
                } else {
                    buffer.finish(discardingBuffered: true)
                }
            } else {
                watch = (
                    ObjectIdentifier(senderObject),
                    _SenderWatch.watch(senderObject) { buffer.finish(discardingBuffered: true) }
                )
            }
        }
        buffer.onTermination { [finalizer, watch] in
            token.invalidate()
            if let finalizer { finalizer.proxy.removeFinalizer(finalizer.id) }
            if let watch { _SenderWatch.unwatch(watch.sender, id: watch.id) }
        }
        if !token.isActive { buffer.finish() }
        return AsyncIterator(buffer: buffer, relay: relay, sender: sender)
    }

    /// Yields the notifications; see ``PostedNotifications``.
    ///
    /// ```swift
    /// while let notification = await iterator.next(isolation: #isolation) { print(notification.payload) }
    /// ```
    ///
    /// `for await` calls ``next(isolation:)``, which awaits in the caller's
    /// isolation; ``next()`` compiles only from nonisolated code.
    public struct AsyncIterator: AsyncIteratorProtocol {
        /// The buffer; `nil` once the sender died (dropped then, which
        /// releases what was buffered).
        var buffer: _AsyncBuffer<Element>?
        /// The listener of the relation: it ends when the iterator dies.
        let relay: _StreamRelay
        /// The sender the sequence filters on, if any: a notification it
        /// posted is yielded only while it lives.
        let sender: _UnretainedReference?

        init(buffer: _AsyncBuffer<Element>, relay: _StreamRelay, sender: _UnretainedReference?) {
            self.buffer = buffer
            self.relay = relay
            self.sender = sender
        }

        /// `element`, unless the sender died (then the sequence finishes,
        /// and what it still buffers is released, never yielded).
        ///
        /// - Complexity: O(1) (one liveness probe), O(buffered) once the
        ///   sender died.
        private mutating func passing(_ element: Element?) -> Element? {
            guard let sender, sender.isGone else { return element }
            buffer?.finish(discardingBuffered: true)
            buffer = nil
            return nil
        }

        /// The next notification, or `nil` once the sequence finished,
        /// awaited off any actor.
        ///
        /// ```swift
        /// nonisolated func next(of iterator: inout PostedNotifications<Int>.AsyncIterator) async
        ///     -> PostedNotification<Int>?
        /// {
        ///     await iterator.next()
        /// }
        /// ```
        ///
        /// It compiles only from nonisolated code (the iterator is not
        /// `Sendable`); from an actor, call ``next(isolation:)``.
        public mutating func next() async -> Element? {
            guard let buffer else { return nil }
            relay.consumer.record()
            return passing(await buffer.next(isolation: nil as (any Actor)?))
        }

        /// The next notification, or `nil` once the sequence finished,
        /// awaited in the caller's isolation.
        ///
        /// ```swift
        /// let notification = await iterator.next(isolation: #isolation)
        /// ```
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
            guard let buffer else { return nil }
            relay.consumer.record()
            return passing(await buffer.next(isolation: actor))
        }
    }
}
