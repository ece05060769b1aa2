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
