import Foundation
import SafeObserve

extension NotificationCenter {
    /// Observes the Foundation notifications named `name` on behalf of
    /// `listener`, until the listener dies, the token is invalidated, or
    /// ``safeUnobserve(_:object:by:)`` is called — the self-cleaning
    /// observers of ``NotificationHub``, for notifications that existing
    /// code posts through `NotificationCenter`.
    ///
    /// ```swift
    /// NotificationCenter.default.safeObserve(.NSSystemTimeZoneDidChange, by: clock) { clock, _ in
    ///     clock.refresh()
    /// }
    /// // Nothing to remove: the observation ends when `clock` dies.
    /// ```
    ///
    /// The posting side does not change: `post(name:object:userInfo:)`
    /// reaches these observers as it reaches Foundation's own.
    ///
    /// - The sender filter (`object`) holds the object by identity without
    ///   keeping it alive; once it died, nothing matches, and an object
    ///   later allocated at its address is not taken for it. Only class
    ///   instances can be filtered on (a value posted as `object` matches
    ///   unfiltered observers only).
    /// - The handler runs where `isolation` says, as every SafeObserve handler
    ///   does: on the caller's actor when registered from one (synchronously
    ///   for a notification posted there, in order for one posted
    ///   elsewhere), on the posting thread otherwise. A `Notification` that
    ///   hops to an actor is handed over as Foundation hands one to an
    ///   observer on another queue: its `object` and `userInfo` values are
    ///   shared, not copied.
    /// - Observing the same (name, object, listener) again keeps the first
    ///   handler and returns the first token.
    ///
    /// The bridge adds one Foundation observer per (center, name) it was
    /// asked for, for the center's lifetime; every SafeObserve observer of
    /// that name shares it.
    ///
    /// - Parameters:
    ///   - name: The notification name.
    ///   - object: Only notifications posted with this object, if given.
    ///     Never retained.
    ///   - listener: The object on whose behalf the handler runs. Never
    ///     retained.
    ///   - isolation: The actor the handler is isolated to, or `nil` for the
    ///     posting thread; the caller's by default.
    ///   - handler: Called with the listener and the notification.
    /// - Returns: The relation's token; `invalidate()` ends it, idempotently.
    @discardableResult
    public func safeObserve<Listener: AnyObject>(
        _ name: Notification.Name,
        object: AnyObject? = nil,
        by listener: Listener,
        isolation: isolated (any Actor)? = #isolation,
        handler: @escaping (Listener, Notification) -> Void
    ) -> SafeObserve.ObservationToken {
        let bridge = _FoundationBridge.bridge(for: self, forwarding: name)
        return bridge.hub.observe(bridge.name(for: name), from: object, by: listener, isolation: isolation) {
            listener, posted in
            handler(listener, posted.payload.notification)
        }
    }

    /// Ends `listener`'s SafeObserve observation of `name` (with `object`,
    /// if given, or the unfiltered one) on this center. Idempotent.
    ///
    /// ```swift
    /// NotificationCenter.default.safeUnobserve(.NSSystemTimeZoneDidChange, by: clock)
    /// ```
    ///
    /// - Parameters:
    ///   - name: The notification name.
    ///   - object: The sender filter the observation was made with.
    ///   - listener: The listener.
    public func safeUnobserve(_ name: Notification.Name, object: AnyObject? = nil, by listener: AnyObject) {
        guard let bridge = _FoundationBridge.existingBridge(for: self) else { return }
        bridge.hub.unobserve(bridge.name(for: name), from: object, by: listener)
    }

    /// Ends every SafeObserve observation `listener` made on this center.
    /// Idempotent.
    ///
    /// ```swift
    /// NotificationCenter.default.safeUnobserve(by: clock)
    /// ```
    ///
    /// - Parameter listener: The listener.
    public func safeUnobserve(by listener: AnyObject) {
        _FoundationBridge.existingBridge(for: self)?.hub.unobserve(by: listener)
    }
}

/// A Foundation notification as the bridge's hub carries it.
// @unchecked Sendable: SafeObserve never reads or mutates it; it is handed
// from the posting thread to each handler, as Foundation hands a
// notification to its observers on other queues.
struct _BridgedNotification: @unchecked Sendable {
    let notification: Notification
}

/// The bridge between one `NotificationCenter` and the hub its SafeObserve
/// observers live in.
final class _FoundationBridge: Sendable {
    /// The hub the center's notifications are forwarded to.
    let hub = NotificationHub()
    /// The center; a bridge found for a dead center's identity is replaced.
    weak let center: NotificationCenter?
    /// The names forwarded, with their Foundation observers.
    let forwarded = _Locked<[Notification.Name: any NSObjectProtocol]>([:])

    init(center: NotificationCenter) {
        self.center = center
    }

    /// The hub name a Foundation name is forwarded under.
    func name(for name: Notification.Name) -> NotificationName<_BridgedNotification> {
        NotificationName("Foundation." + name.rawValue)
    }

    /// Every center's bridge, by the center's identity.
    private static let bridges = _Locked<[ObjectIdentifier: _FoundationBridge]>([:])

    /// The bridge for `center`, created if needed, forwarding `name`.
    static func bridge(for center: NotificationCenter, forwarding name: Notification.Name) -> _FoundationBridge {
        let bridge = bridges.withLock { bridges in
            let key = ObjectIdentifier(center)
            if let bridge = bridges[key], bridge.center === center { return bridge }
            let bridge = _FoundationBridge(center: center)
            bridges[key] = bridge  // a dead center's bridge is dropped here
            return bridge
        }
        bridge.forward(name, from: center)
        return bridge
    }

    /// The bridge for `center`, if SafeObserve observers were added to it.
    static func existingBridge(for center: NotificationCenter) -> _FoundationBridge? {
        bridges.withLock { bridges in
            guard let bridge = bridges[ObjectIdentifier(center)], bridge.center === center else { return nil }
            return bridge
        }
    }

    /// Adds the Foundation observer forwarding `name` to the hub, once.
    /// Under the bridge's lock, which nothing Foundation calls back into
    /// takes (a forwarded post takes only the hub's).
    private func forward(_ name: Notification.Name, from center: NotificationCenter) {
        forwarded.withLock { forwarded in
            guard forwarded[name] == nil else { return }
            let hub = hub
            let hubName = self.name(for: name)
            forwarded[name] = center.addObserver(forName: name, object: nil, queue: nil) { notification in
                // Only a class instance can be a sender: a value posted as
                // `object` is boxed anew each time and would match nothing.
                let sender = notification.object.flatMap { type(of: $0) is AnyClass ? $0 as AnyObject : nil }
                hub.post(hubName, payload: _BridgedNotification(notification: notification), from: sender)
            }
        }
    }
}

/// A value behind an `NSLock`: a pthread mutex, which the thread sanitizer
/// understands (Synchronization's `Mutex` parks on a futex it cannot see).
// @unchecked Sendable: `value` is only read or written inside `withLock`.
final class _Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) -> Result) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
