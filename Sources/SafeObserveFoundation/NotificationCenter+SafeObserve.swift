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
    /// that name shares it. A center that dies ends every SafeObserve
    /// observation made on it and releases their handlers, during its own
    /// deinitialization, as a ``NotificationHub`` that dies does.
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

    /// Ends `listener`'s SafeObserve observations of `name` on this center:
    /// the one with `object` if given, every one of them otherwise
    /// (unfiltered or filtered on any object), as
    /// `removeObserver(_:name:object: nil)` does. Idempotent.
    ///
    /// ```swift
    /// NotificationCenter.default.safeUnobserve(.NSSystemTimeZoneDidChange, by: clock)
    /// ```
    ///
    /// - Parameters:
    ///   - name: The notification name.
    ///   - object: The sender filter of the observation to end; `nil` ends
    ///     those of `name` whatever their object.
    ///   - listener: The listener.
    /// - Complexity: O(*k*) expected with an object, *k* being the
    ///   listener's observations of that (name, object); O(*n*) without, in
    ///   the listener's observations.
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

    /// Ends every SafeObserve observation `listener` made on this center
    /// with `object` as its sender filter, of any name — as
    /// `removeObserver(_:name: nil, object:)` does. Idempotent.
    ///
    /// ```swift
    /// NotificationCenter.default.safeUnobserve(object: document, by: editor)
    /// ```
    ///
    /// - Parameters:
    ///   - object: The sender filter the observations were made with.
    ///   - listener: The listener.
    /// - Complexity: O(*n*) in the listener's relations.
    public func safeUnobserve(object: AnyObject, by listener: AnyObject) {
        _FoundationBridge.existingBridge(for: self)?.hub.unobserve(from: object, by: listener)
    }

    /// The live SafeObserve observations made on this center, of every
    /// listener, in registration order (debugging and leak tests).
    ///
    /// ```swift
    /// #expect(center.safeRelations().isEmpty)   // nothing leaked
    /// ```
    ///
    /// - Returns: A token per observation; an observation whose listener or
    ///   object died is ended when found, and not listed.
    /// - Complexity: O(*c* + *n* log *n*), *c* being the names and objects
    ///   observed on this center and *n* the observations.
    public func safeRelations() -> [SafeObserve.ObservationToken] {
        _FoundationBridge.existingBridge(for: self)?.hub.relations() ?? []
    }

    /// The live SafeObserve observations `listener` made on this center, in
    /// registration order.
    ///
    /// ```swift
    /// #expect(center.safeRelations(observedBy: clock).count == 1)
    /// ```
    ///
    /// - Parameter listener: The listener.
    /// - Returns: A token per observation.
    /// - Complexity: O(*n* log *n*) in the listener's relations.
    public func safeRelations(observedBy listener: AnyObject) -> [SafeObserve.ObservationToken] {
        _FoundationBridge.existingBridge(for: self)?.hub.relations(observedBy: listener) ?? []
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
///
/// Owned by the center, through the Foundation observers it adds (their
/// blocks capture it): so the bridge, its hub and every relation made on it
/// die with the center, and the relations end then, as a hub's do when it
/// dies. The table of bridges only finds a center's bridge; it never keeps
/// one alive.
final class _FoundationBridge: Sendable {
    /// The hub the center's notifications are forwarded to.
    let hub = NotificationHub()
    /// The center's identity: the bridge's key in the table. While the
    /// bridge lives, so does its center (the center owns it; other holders
    /// are calls made on the center), so no other center has this address.
    let centerID: ObjectIdentifier
    /// The names forwarded. Not their Foundation observers: each holds its
    /// block, which holds this bridge (a cycle); the center drops them
    /// when it dies.
    let forwarded = _Locked<Set<Notification.Name>>([])

    init(center: NotificationCenter) {
        centerID = ObjectIdentifier(center)
    }

    deinit {
        // Forget this bridge's entry, unless a center born at the same
        // address already replaced it.
        let id = ObjectIdentifier(self)
        let entry = Self.bridges.withLock { bridges -> Entry? in
            guard let entry = bridges[centerID], entry.bridgeID == id else { return nil }
            bridges[centerID] = nil
            return entry
        }
        _ = entry  // released unlocked
    }

    /// The hub name a Foundation name is forwarded under.
    func name(for name: Notification.Name) -> NotificationName<_BridgedNotification> {
        NotificationName("Foundation." + name.rawValue)
    }

    /// A bridge in the table, held weakly (its center owns it). A class: a
    /// struct holding a `weak` reference, as a dictionary's value, was
    /// miscompiled in debug builds (Swift 6.3.1, Linux).
    private final class Entry: Sendable {
        weak let bridge: _FoundationBridge?
        let bridgeID: ObjectIdentifier

        init(_ bridge: _FoundationBridge) {
            self.bridge = bridge
            bridgeID = ObjectIdentifier(bridge)
        }
    }

    /// Every living center's bridge, by the center's identity.
    private static let bridges = _Locked<[ObjectIdentifier: Entry]>([:])

    /// The bridge for `center`, created if needed, forwarding `name`.
    static func bridge(for center: NotificationCenter, forwarding name: Notification.Name) -> _FoundationBridge {
        let (bridge, replaced) = bridges.withLock { bridges -> (_FoundationBridge, Entry?) in
            let key = ObjectIdentifier(center)
            if let bridge = bridges[key]?.bridge { return (bridge, nil) }
            // An entry whose bridge is gone is a dead center's, whose
            // bridge's deinit is under way: replaced here.
            let bridge = _FoundationBridge(center: center)
            let replaced = bridges.updateValue(Entry(bridge), forKey: key)
            return (bridge, replaced)
        }
        _ = replaced  // released unlocked
        bridge.forward(name, from: center)
        return bridge
    }

    /// The bridge for `center`, if SafeObserve observers were added to it.
    static func existingBridge(for center: NotificationCenter) -> _FoundationBridge? {
        bridges.withLock { bridges in bridges[ObjectIdentifier(center)]?.bridge }
    }

    /// Adds the Foundation observer forwarding `name` to the hub, once.
    /// Under the bridge's lock, which nothing Foundation calls back into
    /// takes (a forwarded post takes only the hub's).
    private func forward(_ name: Notification.Name, from center: NotificationCenter) {
        forwarded.withLock { forwarded in
            guard forwarded.insert(name).inserted else { return }
            let hubName = self.name(for: name)
            // The block holds the bridge (and so the hub): the center owns
            // both, through this observer, until it dies.
            _ = center.addObserver(forName: name, object: nil, queue: nil) { [self] notification in
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
