/// A notification as an observer receives it.
///
/// ```swift
/// hub.observe(.unreadCountChanged, by: badge) { badge, notification in
///     badge.count = notification.payload
/// }
/// ```
public struct PostedNotification<Payload: Sendable>: Sendable {
    /// The notification's name.
    ///
    /// ```swift
    /// print(notification.name.rawValue)
    /// ```
    public var name: NotificationName<Payload> { NotificationName(identity: _nameID) }
    /// The object that posted it, if it said so (never retained: `nil` once
    /// it died).
    ///
    /// ```swift
    /// if notification.sender === inbox { … }
    /// ```
    public var sender: AnyObject? { _sender?.reference.load() }
    /// What it carries.
    ///
    /// ```swift
    /// badge.count = notification.payload
    /// ```
    public let payload: Payload

    /// The name's identity: a notification is copied along each delivery,
    /// and an integer costs nothing to copy, unlike the name's string.
    @usableFromInline let _nameID: Int
    /// The sender, if any: a class reference, so that a notification
    /// without one costs nothing to copy or destroy, and one with a sender
    /// shares the identity its sender-filtered channel keeps.
    @usableFromInline let _sender: _SenderIdentity?

    @inlinable
    init(nameID: Int, sender: _SenderIdentity?, payload: Payload) {
        _nameID = nameID
        _sender = sender
        self.payload = payload
    }
}

/// A notification of any name, as an observer of every name receives it
/// (see ``NotificationHub/observeEvery(from:by:isolation:handler:)``).
///
/// ```swift
/// hub.observeEvery(by: logger) { logger, notification in
///     logger.log("\(notification.name): \(notification.payload)")
/// }
/// ```
public struct AnyPostedNotification: Sendable {
    /// The name's raw value.
    ///
    /// ```swift
    /// print(notification.name)
    /// ```
    public var name: String { _NotificationNames.rawValue(of: _nameID) }
    /// The object that posted it, if it said so and is alive.
    ///
    /// ```swift
    /// if notification.sender === inbox { … }
    /// ```
    public var sender: AnyObject? { _sender?.reference.load() }
    /// The payload, type-erased.
    ///
    /// ```swift
    /// if let count = notification.payload as? Int { … }
    /// ```
    public let payload: any Sendable

    @usableFromInline let _nameID: Int
    @usableFromInline let _sender: _SenderIdentity?

    @inlinable
    init<Payload>(_ notification: PostedNotification<Payload>) {
        _nameID = notification._nameID
        _sender = notification._sender
        payload = notification.payload
    }
}

/// A notification's reference to its sender: never keeps the sender alive,
/// and never mistakes another object at its address for it.
@usableFromInline
final class _SenderIdentity: Sendable {
    @usableFromInline let reference: _UnretainedReference

    /// The identity `reference` names (a sender-filtered channel's).
    init(_ reference: _UnretainedReference) {
        self.reference = reference
    }

    /// An identity of its own for `sender` (a post from a sender no
    /// observer filters on).
    @usableFromInline
    init(sender: AnyObject) {
        reference = _UnretainedReference(sender)
    }
}
