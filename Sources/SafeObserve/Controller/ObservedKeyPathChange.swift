/// One change of one of several key paths, with the key path it came from.
///
/// Delivered by the multi-key-path forms of ``ObservationController`` and to
/// an ``ObservationControllerDelegate``. The values are type-erased because
/// the key paths of one call may have different value types; cast them back
/// after comparing ``keyPath``:
///
/// ```swift
/// controller.observe(account, keyPaths: \.balance, \.owner) { observer, account, change in
///     if change.keyPath == \Account.balance, let balance = change.newValue as? Int {
///         observer.show(balance)
///     }
/// }
/// ```
///
/// Fields are filled exactly as in ``ObservedChange`` (see its table).
public struct ObservedKeyPathChange<Root> {
    /// The key path that changed.
    ///
    /// ```swift
    /// if change.keyPath == \Account.balance { ... }
    /// ```
    public let keyPath: PartialKeyPath<Root>

    /// The value after the change (`nil` unless `.new` or `.initial` applies).
    ///
    /// ```swift
    /// let balance = change.newValue as? Int
    /// ```
    public let newValue: Any?

    /// The value before the change, when `.old` was requested.
    ///
    /// ```swift
    /// let previous = change.oldValue as? Int
    /// ```
    public let oldValue: Any?

    /// `true` for the delivery made before the value is stored (`.prior`).
    ///
    /// ```swift
    /// if change.isPrior { print("about to change", change.keyPath) }
    /// ```
    public let isPrior: Bool

    /// `true` for the delivery made during registration (`.initial`).
    ///
    /// ```swift
    /// if change.isInitial { print("current value", change.newValue!) }
    /// ```
    public let isInitial: Bool

    /// Erases a typed change of `keyPath`.
    ///
    /// ```swift
    /// let change = ObservedKeyPathChange(\Counter.count, ObservedChange(newValue: 2, oldValue: 1))
    /// ```
    ///
    /// - Parameters:
    ///   - keyPath: The key path the change came from.
    ///   - change: The typed change.
    public init<Value>(_ keyPath: KeyPath<Root, Value>, _ change: ObservedChange<Value>) {
        self.keyPath = keyPath
        // Flatten: a nil `Value?` must read as nil, not as `Optional(nil)`.
        newValue = change.newValue.map { $0 as Any }
        oldValue = change.oldValue.map { $0 as Any }
        isPrior = change.isPrior
        isInitial = change.isInitial
    }
}
