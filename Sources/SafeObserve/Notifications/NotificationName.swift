/// The name of a notification, carrying the type of its payload, so that
/// posting and observing it are checked by the compiler.
///
/// Declare names once, as static members:
///
/// ```swift
/// extension NotificationName where Payload == Int {
///     static let unreadCountChanged = NotificationName("unreadCountChanged")
/// }
///
/// hub.post(.unreadCountChanged, payload: 3)
/// ```
///
/// Two names are the same name when their raw values and payload types are
/// equal. For code whose notifications carry a `userInfo`-style dictionary,
/// ``UntypedNotificationName`` is a name whose payload is one.
public struct NotificationName<Payload: Sendable>: Hashable, Sendable, CustomStringConvertible {
    /// The name as a string, as given.
    ///
    /// ```swift
    /// assert(NotificationName<Int>("unreadCountChanged").rawValue == "unreadCountChanged")
    /// ```
    public let rawValue: String

    /// The name's identity within the process (dense, so that a hub finds a
    /// name's observers by index).
    @usableFromInline let id: Int

    /// Creates a name.
    ///
    /// ```swift
    /// let unread = NotificationName<Int>("unreadCountChanged")
    /// ```
    ///
    /// - Complexity: O(*n*) in the length of `rawValue`, once per name value
    ///   (declare names as `static let`).
    public init(_ rawValue: String) {
        self.rawValue = rawValue
        id = _NotificationNames.identity(of: rawValue, payload: Payload.self)
    }

    /// The name whose identity is `id` (made by ``init(_:)`` before).
    init(identity id: Int) {
        self.id = id
        rawValue = _NotificationNames.rawValue(of: id)
    }

    /// The raw value and the payload type, as in `unreadCountChanged (Int)`.
    ///
    /// ```swift
    /// print(NotificationName<Int>("unreadCountChanged"))   // unreadCountChanged (Int)
    /// ```
    public var description: String { "\(rawValue) (\(Payload.self))" }

    /// Whether both are the same name (equal raw values and payload types).
    ///
    /// ```swift
    /// assert(NotificationName<Int>("a") == NotificationName<Int>("a"))
    /// ```
    public static func == (lhs: Self, rhs: Self) -> Bool { lhs.id == rhs.id }

    /// Hashes the name's identity.
    ///
    /// ```swift
    /// let names: Set = [NotificationName<Int>("a"), NotificationName<Int>("b")]
    /// ```
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }
}

/// A name whose payload is a `userInfo`-style dictionary, for notifications
/// that carry one.
///
/// ```swift
/// let didLogIn = UntypedNotificationName("didLogIn")
/// hub.post(didLogIn, payload: ["user": "ada"])
/// ```
public typealias UntypedNotificationName = NotificationName<[String: any Sendable]>

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

/// The process-wide identities of notification names.
@usableFromInline
enum _NotificationNames {
    private struct Key: Hashable {
        let rawValue: String
        let payload: ObjectIdentifier
    }

    private struct Table {
        var identities: [Key: Int] = [:]
        var rawValues: [String] = []
    }

    private static let table = _Mutex(Table())

    /// The identity of the name `rawValue` with payload type `payload`,
    /// assigned on first use.
    static func identity(of rawValue: String, payload: Any.Type) -> Int {
        let key = Key(rawValue: rawValue, payload: ObjectIdentifier(payload))
        return table.withLock { table in
            if let id = table.identities[key] { return id }
            let id = table.rawValues.count
            table.identities[key] = id
            table.rawValues.append(rawValue)
            return id
        }
    }

    /// The raw value of the name whose identity is `id`.
    static func rawValue(of id: Int) -> String {
        table.withLock { $0.rawValues[id] }
    }
}
