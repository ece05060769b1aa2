/// A handler that belongs to no listener (made by
/// ``NotificationHub/subscribe(_:from:isolation:handler:)`` or
/// ``NotificationHub/subscribeEvery(from:isolation:handler:)``): it runs
/// until the subscription is cancelled or deinitialized.
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
