/// A listener whose relations are torn down inside its own `deinit`.
///
/// Any class can listen. A listener that adopts this protocol — one stored
/// property — has every relation it holds removed, and every handler
/// released, the moment it is destroyed. Other listeners are cleaned up
/// lazily (see ``SafeObservable/safeObserve(_:by:options:changeHandler:)``).
///
/// ```swift
/// final class CounterLabel: SafeObserver {
///     let observerLifetime = ObserverLifetime()
///     var text = ""
/// }
/// ```
public protocol SafeObserver: AnyObject {
    /// The listener's side of its relations; declare it as a stored `let`.
    ///
    /// ```swift
    /// let observerLifetime = ObserverLifetime()
    /// ```
    var observerLifetime: ObserverLifetime { get }
}

/// The storage a ``SafeObserver`` carries; its `deinit` ends every relation
/// of the listener.
///
/// Keep it as a stored `let` of the listener and nowhere else: its lifetime
/// is what tells SafeObserve that the listener is gone.
///
/// ```swift
/// final class CounterLabel: SafeObserver {
///     let observerLifetime = ObserverLifetime()
/// }
/// ```
public final class ObserverLifetime: Sendable {
    let proxy = _ListenerProxy()

    /// Creates the (empty) storage; nothing else is allocated until the
    /// listener first observes something.
    ///
    /// ```swift
    /// let observerLifetime = ObserverLifetime()
    /// ```
    public init() {}

    deinit {
        proxy.removeAll(final: true)
    }
}
